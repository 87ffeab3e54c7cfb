import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { waitFor } from '../support/wait.js';
import { type SignedClient, signedClient } from '../support/webhook-client.js';
import {
  type Cli,
  chartSets,
  cli,
  createVclusterPki,
  nodeContext,
  repo,
  seconds,
  servingCert,
  sniReaches,
  vclusterDeployment,
  vclusterService,
} from './node.js';

// The operations runbook, for real, on a one-node Kubernetes (scripts/kube/node-up.sh): the chart installed
// with helm in the sidecar shape, a "vCluster" (a pod running the project's kube-apiserver) behind a NodePort
// Service, registered through the signed webhook; then kubectl and curl reach it through HAProxy by SNI, and
// real pods are deleted, restarted and upgraded under it.
const run = promisify(execFile);
const NS = 'kubebyon-system';
const RELEASE = 'kubebyon-haproxy-adapter';
const VC_NS = 'vcluster-demo';
const HOST = 'api.demo.example.com';
const CHART = join(repo, 'charts', 'kubebyon-haproxy-adapter');
// Short lease timings: a replacement leads within seconds, and the suite stays short.
const LEASE = { durationMs: 6000, renewDeadlineMs: 4000, retryPeriodMs: 1000 };
const ADAPTER_PORT = 18080;

const timings: Record<string, number> = {};
const suiteStart = Date.now();

describe('the runbook on a real node (sidecar shape)', () => {
  const ctx = nodeContext();
  const kubectl: Cli = cli(ctx.kubectlBin, ctx.kubeconfig);
  const helm: Cli = cli(ctx.helmBin, ctx.kubeconfig);
  const secret = randomBytes(24).toString('hex');
  const adminToken = randomBytes(24).toString('hex');
  const [adapterRepo, adapterTag] = ctx.images.adapter.split(':') as [string, string];
  const [haproxyRepo, haproxyTag] = ctx.images.haproxy.split(':') as [string, string];
  let webhook: SignedClient;
  let vcKubeconfig: string;
  let vcCa: string;
  let vcNodePort = 0;
  const acknowledged = new Set<string>();

  const json = async (...args: string[]) => JSON.parse(await kubectl(...args, '-o', 'json'));
  const edgePods = async () =>
    (await json('-n', NS, 'get', 'pods', '-l', 'app.kubernetes.io/component=edge')).items as Array<{
      metadata: { name: string; deletionTimestamp?: string };
      status: { conditions?: Array<{ type: string; status: string }>; containerStatuses?: unknown[] };
    }>;
  const readyEdgePod = async () =>
    (await edgePods()).find(
      (p) =>
        !p.metadata.deletionTimestamp &&
        p.status.conditions?.some((c) => c.type === 'Ready' && c.status === 'True'),
    )?.metadata.name;
  const leaseHolder = async () =>
    (await json('-n', NS, 'get', 'lease', RELEASE)).spec?.holderIdentity as string | undefined;
  const clusterState = async (name: string) => {
    const res = await webhook.request('GET', `/v1/clusters/${name}`);
    return res.status === 200
      ? (res.body as { state: string; reason?: string })
      : { state: `http ${res.status}` };
  };
  const body = (host: string) => ({
    control_plane_host: host,
    public_access_mode: 'loadbalancer',
    service: { namespace: VC_NS, name: 'demo', port: 443 },
  });
  const vcService = (nodePort?: number) => vclusterService(VC_NS, nodePort);
  const curlVersion = async () => {
    const { stdout } = await run('curl', [
      '-sk',
      '--max-time',
      '5',
      '--noproxy',
      '*',
      '--resolve',
      `${HOST}:443:${ctx.nodeIp}`,
      `https://${HOST}/version`,
    ]);
    return JSON.parse(stdout) as { gitVersion: string };
  };
  const vcKubectl = (...args: string[]) => run(ctx.kubectlBin, ['--kubeconfig', vcKubeconfig, ...args]);
  const allRouted = async (hosts: string[]) => {
    const results = await Promise.all(hosts.map((h) => sniReaches(ctx.nodeIp, h)));
    return hosts.filter((_, i) => !results[i]);
  };

  /** New clusters sent one after another (bounded in count and time); `acked` holds the acknowledged hosts. */
  const startBurst = (prefix: string, maxMs = 240_000) => {
    const b = { acked: [] as string[], failed: 0, stopped: false, done: Promise.resolve() };
    b.done = (async () => {
      const t = Date.now();
      for (let i = 0; i < 600 && !b.stopped && Date.now() - t < maxMs; i++) {
        const host = `${prefix}-${i}.demo.example.com`;
        const answer = webhook.request('PUT', `/v1/clusters/${prefix}-${i}`, body(host)).then(
          (r) => r.status === 202 || r.status === 200,
          () => false,
        );
        const ok = await Promise.race([
          answer,
          new Promise<boolean>((r) => setTimeout(() => r(false), 10_000)),
        ]);
        if (ok) b.acked.push(host);
        else b.failed++;
        await new Promise((r) => setTimeout(r, ok ? 150 : 500));
      }
    })();
    return b;
  };

  /** `helm upgrade` of the release, keeping its values, with `args` on top. */
  const upgrade = (...args: string[]) => helm('upgrade', RELEASE, CHART, '-n', NS, '--reuse-values', ...args);

  /**
   * Lets burst `b` run until `acked` changes are acknowledged (`when`: by whom, after what), stops it, and
   * returns the acknowledged hosts (of every burst so far) that HAProxy still does not route once settled.
   */
  const finishBurst = async (b: ReturnType<typeof startBurst>, acked: number, when: string) => {
    await waitFor(() => b.acked.length >= acked, 180_000, `${acked} changes acknowledged ${when}`);
    b.stopped = true;
    await b.done;
    for (const h of b.acked) acknowledged.add(h);
    return waitFor(() => allRouted([...acknowledged]), 120_000, `every acknowledged change routed ${when}`, {
      ok: (m) => m.length === 0,
      everyMs: 500,
    });
  };

  beforeAll(async () => {
    // A node kept from an earlier run (KUBEBYON_TEST_NODE_REUSE) may still hold them.
    await helm('uninstall', RELEASE, '-n', NS, '--ignore-not-found', '--wait');
    await kubectl('delete', 'namespace', NS, VC_NS, '--ignore-not-found', '--wait=true');
    await kubectl('create', 'namespace', NS);
    await kubectl(
      '-n',
      NS,
      'create',
      'secret',
      'generic',
      RELEASE,
      `--from-literal=webhook-secret=${secret}`,
    );

    // The vCluster: kube-apiserver and etcd in one pod, its own serving certificate for HOST and a token.
    const pki = await servingCert(HOST);
    vcCa = pki.ca;
    writeFileSync(join(pki.dir, 'tokens.csv'), `${adminToken},vc-admin,vc-admin,"system:masters"\n`);
    await createVclusterPki(kubectl, VC_NS, pki.dir);
    const deployment = vclusterDeployment(VC_NS, ctx.images.vcluster);
    await kubectl.withInput(JSON.stringify(deployment), 'apply', '-f', '-');
    await kubectl.withInput(JSON.stringify(vcService()), 'apply', '-f', '-');
    vcNodePort = (await json('-n', VC_NS, 'get', 'service', 'demo')).spec.ports[0].nodePort;
    vcKubeconfig = join(pki.dir, 'kubeconfig');
    // What a user of the vCluster holds: the public name, reached at the node's address with the name as SNI
    // (no /etc/hosts entry needed).
    writeFileSync(
      vcKubeconfig,
      JSON.stringify({
        apiVersion: 'v1',
        kind: 'Config',
        clusters: [
          {
            name: 'demo',
            cluster: {
              server: `https://${ctx.nodeIp}:443`,
              'tls-server-name': HOST,
              'certificate-authority-data': Buffer.from(vcCa).toString('base64'),
            },
          },
        ],
        users: [{ name: 'admin', user: { token: adminToken } }],
        contexts: [{ name: 'demo', context: { cluster: 'demo', user: 'admin' } }],
        'current-context': 'demo',
      }),
    );
  });

  afterAll(async () => {
    timings.suite = seconds(suiteStart);
    console.log(`[node] timings (s): ${JSON.stringify({ nodeUp: ctx.nodeUpSeconds, ...timings })}`);
    // The node's :443 is free again for the next file.
    await helm('uninstall', RELEASE, '-n', NS, '--ignore-not-found', '--wait');
    await kubectl('delete', 'namespace', NS, VC_NS, '--ignore-not-found', '--wait=true');
  });

  it('installs the chart with helm in the sidecar shape, every pod Ready', async () => {
    const t = Date.now();
    await helm(
      'install',
      RELEASE,
      CHART,
      '-n',
      NS,
      '--wait',
      '--timeout',
      '240s',
      ...chartSets({
        mode: 'sidecar',
        imagePullPolicy: 'Never',
        'adapter.image.repository': adapterRepo,
        'adapter.image.tag': adapterTag,
        'edge.images.sidecar.repository': haproxyRepo,
        'edge.images.sidecar.tag': haproxyTag,
        'edge.bindAddress': `${ctx.nodeIp}:443`,
        'adapter.port': ADAPTER_PORT,
        'adapter.lease.durationMs': LEASE.durationMs,
        'adapter.lease.renewDeadlineMs': LEASE.renewDeadlineMs,
        'adapter.lease.retryPeriodMs': LEASE.retryPeriodMs,
        'service.type': 'NodePort',
      }),
    );
    const pod = await waitFor(readyEdgePod, 60_000, 'a Ready edge pod');
    timings.chartInstalled = seconds(t);
    expect(pod).toMatch(new RegExp(`^${RELEASE}-edge-`));
    // The webhook as a user reaches it: the chart's Service, here through its NodePort on the node's address.
    const svc = await json('-n', NS, 'get', 'service', RELEASE);
    const port = (svc.spec.ports as Array<{ nodePort: number }>)[0]?.nodePort;
    expect(port).toBeGreaterThan(0);
    webhook = signedClient(`http://${ctx.nodeIp}:${port}`, secret);
    await waitFor(
      async () => (await webhook.request('GET', '/v1/clusters')).status === 200,
      60_000,
      'the webhook',
    );
    // The adapter runs with the chart's restrictive securityContext and a projected token.
    const spec = (await json('-n', NS, 'get', 'pod', pod ?? '')).spec;
    const adapter = spec.containers.find((c: { name: string }) => c.name === 'adapter');
    expect(adapter.securityContext).toMatchObject({
      runAsNonRoot: true,
      readOnlyRootFilesystem: true,
      capabilities: { drop: ['ALL'] },
    });
  });

  it('registers the vCluster through the signed webhook; kubectl get ns and curl /version reach it by SNI', async () => {
    await waitFor(
      async () => (await json('-n', VC_NS, 'get', 'deployment', 'demo')).status.readyReplicas === 1,
      120_000,
      'the vCluster pod Ready',
    );
    const t = Date.now();
    const res = await webhook.request('PUT', '/v1/clusters/demo?wait=true', body(HOST));
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(res.body.state).toBe('applied');
    acknowledged.add(HOST);
    // The adapter found the node's InternalIP and the Service's NodePort from the real objects.
    const status = await clusterState('demo');
    expect(status.state).toBe('applied');
    const servers = (await webhook.request('GET', '/v1/clusters/demo')).body.servers;
    expect(servers).toEqual([`${ctx.nodeIp}:${vcNodePort}`]);

    const version = await waitFor(curlVersion, 30_000, 'curl /version through HAProxy');
    timings.firstRouteApplied = seconds(t);
    expect(version.gitVersion).toMatch(/^v1\.34\./);
    const { stdout } = await vcKubectl('get', 'ns', '-o', 'name');
    expect(stdout.split('\n')).toEqual(
      expect.arrayContaining(['namespace/default', 'namespace/kube-system']),
    );
  });

  it('kubectl get clusterroutes and the published status say applied', async () => {
    const table = await waitFor(
      async () => kubectl('-n', NS, 'get', 'clusterroutes'),
      30_000,
      'an applied row',
      { ok: (t) => /\bdemo\s+demo\s+api\.demo\.example\.com\s+applied\b/.test(t) },
    );
    expect(table).toContain(`https://${HOST}:443`);
    const route = await json('-n', NS, 'get', 'clusterroute', 'demo');
    expect(route.spec.cluster).toBe('demo');
    expect(route.status.state).toBe('applied');
  });
  it('the leader adapter pod deleted with --grace-period=0 --force during a burst: its replacement leads, every acknowledged change is routed', async () => {
    const leader = await leaseHolder();
    expect(leader).toBe(await readyEdgePod());
    const b = startBurst('lead');
    await waitFor(() => b.acked.length >= 10, 60_000, '10 acknowledged changes before the delete');
    const before = b.acked.length;
    const t = Date.now();
    await kubectl('-n', NS, 'delete', 'pod', leader ?? '', '--grace-period=0', '--force');
    const next = await waitFor(leaseHolder, 120_000, 'another holder of the Lease', {
      ok: (h) => !!h && h !== leader,
    });
    timings.leaderTakeover = seconds(t);
    const missing = await finishBurst(b, before + 10, 'by the new leader');
    timings.allRoutedAfterTakeover = seconds(t);
    expect(missing).toEqual([]);
    expect(next).toBe(await readyEdgePod());
    console.log(
      `[node] forced delete: ${b.acked.length} acknowledged, ${b.failed} not (no adapter answering), lease taken after ${timings.leaderTakeover} s`,
    );
  });

  it('an HAProxy pod deleted: its replacement gets every route from a fresh read', async () => {
    const old = await readyEdgePod();
    const t = Date.now();
    await kubectl('-n', NS, 'delete', 'pod', old ?? '', '--wait=false');
    await waitFor(readyEdgePod, 120_000, 'a new Ready edge pod', { ok: (p) => !!p && p !== old });
    const missing = await waitFor(
      () => allRouted([...acknowledged]),
      120_000,
      'every route on the new HAProxy',
      {
        ok: (m) => m.length === 0,
        everyMs: 500,
      },
    );
    timings.haproxyPodReplaced = seconds(t);
    expect(missing).toEqual([]);
    expect((await curlVersion()).gitVersion).toMatch(/^v1\.34\./);
  });

  it('the vCluster pod restarted: the route stays', async () => {
    const old = (await json('-n', VC_NS, 'get', 'pods', '-l', 'app=vcluster-demo')).items[0].metadata.name;
    await kubectl('-n', VC_NS, 'delete', 'pod', old, '--wait=false');
    const states = new Set<string>();
    await waitFor(
      async () => {
        states.add((await clusterState('demo')).state);
        const pods = (await json('-n', VC_NS, 'get', 'pods', '-l', 'app=vcluster-demo')).items as Array<{
          metadata: { name: string };
          status: { conditions?: Array<{ type: string; status: string }> };
        }>;
        return pods.some(
          (p) =>
            p.metadata.name !== old &&
            p.status.conditions?.some((c) => c.type === 'Ready' && c.status === 'True'),
        );
      },
      120_000,
      'the new vCluster pod Ready',
      { everyMs: 500 },
    );
    expect([...states]).toEqual(['applied']);
    expect((await waitFor(curlVersion, 30_000, 'curl /version')).gitVersion).toMatch(/^v1\.34\./);
    const { stdout } = await vcKubectl('get', 'ns', '-o', 'name');
    expect(stdout).toContain('namespace/default');
  });

  it('the Service deleted: the cluster goes degraded, and applied again when it returns', async () => {
    await kubectl('-n', VC_NS, 'delete', 'service', 'demo');
    const degraded = await waitFor(() => clusterState('demo'), 60_000, 'degraded', {
      ok: (s) => s.state === 'degraded',
      everyMs: 500,
    });
    expect(degraded.reason).toMatch(/service_not_found/);
    const route = await waitFor(
      () => json('-n', NS, 'get', 'clusterroute', 'demo'),
      30_000,
      'the published degraded',
      {
        ok: (r) => r.status?.state === 'degraded',
        everyMs: 500,
      },
    );
    expect(route.status.reason).toMatch(/service_not_found/);
    await kubectl.withInput(JSON.stringify(vcService(vcNodePort)), 'apply', '-f', '-');
    await waitFor(() => clusterState('demo'), 60_000, 'applied again', {
      ok: (s) => s.state === 'applied',
      everyMs: 500,
    });
    expect((await waitFor(curlVersion, 30_000, 'curl /version')).gitVersion).toMatch(/^v1\.34\./);
  });

  it('helm upgrade changing the image tag: no acknowledged change lost, no route gone after it', async () => {
    const sock = join(ctx.nodeDir, 'run', 'containerd.sock');
    const newTag = `${adapterTag}-upgrade`;
    await run('ctr', [
      '--address',
      sock,
      '-n',
      'k8s.io',
      'images',
      'tag',
      '--force',
      `docker.io/${ctx.images.adapter}`,
      `docker.io/${adapterRepo}:${newTag}`,
    ]);
    const old = await readyEdgePod();
    const b = startBurst('upg');
    await waitFor(() => b.acked.length >= 5, 60_000, '5 acknowledged changes before the upgrade');
    const before = b.acked.length;
    // How long the demo route answered nothing while the one edge pod of this one node was replaced.
    let probing = true;
    let downSince = 0;
    let longestGapMs = 0;
    const probe = (async () => {
      while (probing) {
        const ok = await sniReaches(ctx.nodeIp, HOST, 443, 1000);
        if (!ok && downSince === 0) downSince = Date.now();
        if (ok && downSince !== 0) {
          longestGapMs = Math.max(longestGapMs, Date.now() - downSince);
          downSince = 0;
        }
        await new Promise((r) => setTimeout(r, 200));
      }
    })();
    const t = Date.now();
    await upgrade('--set', `adapter.image.tag=${newTag}`, '--wait', '--timeout', '240s');
    const pod = await waitFor(readyEdgePod, 120_000, 'the upgraded edge pod', {
      ok: (p) => !!p && p !== old,
    });
    const images = (await json('-n', NS, 'get', 'pod', pod ?? '')).spec.containers.map(
      (c: { image: string }) => c.image,
    );
    expect(images).toContain(`${adapterRepo}:${newTag}`);
    const missing = await finishBurst(b, before + 5, 'after the upgrade');
    timings.upgradeAllRouted = seconds(t);
    probing = false;
    await probe;
    timings.upgradeLongestGap = longestGapMs / 1000;
    expect(missing).toEqual([]);
    console.log(
      `[node] helm upgrade: ${b.acked.length} acknowledged, ${b.failed} not; ${HOST} answered nothing for ${longestGapMs} ms at most`,
    );
  });

  // Runbook 8.4: HAProxy cannot bind 443. What a user sees: the edge pod not Ready, HAProxy's own log, and the
  // reason in the ClusterRoute status the adapter publishes.
  const bindRefused = async (what: string, ...set: string[]) => {
    const old = await readyEdgePod();
    await helm('upgrade', RELEASE, CHART, '-n', NS, '--reuse-values', ...set);
    const pod =
      (await waitFor(
        async () =>
          (await edgePods()).find((p) => p.metadata.name !== old && !p.metadata.deletionTimestamp)?.metadata
            .name,
        120_000,
        `the edge pod ${what}`,
      )) ?? '';
    // HAProxy's own words, in its container's log: the reload the adapter asked for could not bind.
    await waitFor(() => kubectl('-n', NS, 'logs', pod, '-c', 'haproxy'), 120_000, `HAProxy's log (${what})`, {
      ok: (l) => /cannot bind socket \(Permission denied\)/.test(l),
      everyMs: 1000,
    });
    const route = await waitFor(
      () => json('-n', NS, 'get', 'clusterroute', 'demo'),
      60_000,
      `the reason (${what})`,
      {
        ok: (r) => r.status?.state === 'error' && /Permission denied/i.test(r.status?.reason ?? ''),
        everyMs: 1000,
      },
    );
    const table = await kubectl('-n', NS, 'get', 'clusterroutes');
    expect(table).toMatch(/\bdemo\s+demo\s+api\.demo\.example\.com\s+error\b/);
    const status = (await json('-n', NS, 'get', 'pod', pod)).status;
    expect(status.conditions.find((c: { type: string }) => c.type === 'Ready').status).toBe('False');
    console.log(`[node] 8.4 ${what}: reason ${JSON.stringify(route.status.reason)}`);
  };
  // The chart's default gets it right: back to it, the route is applied and answers again.
  const backToDefault = async () => {
    await upgrade(
      '--set-json',
      'edge.securityContext.capabilities={"drop":["ALL"],"add":["NET_BIND_SERVICE"]}',
      '--set',
      'edge.securityContext.runAsUser=0',
      '--set',
      'edge.securityContext.runAsNonRoot=false',
      '--wait',
      '--timeout',
      '240s',
    );
    await waitFor(() => json('-n', NS, 'get', 'clusterroute', 'demo'), 120_000, 'applied again', {
      ok: (r) => r.status?.state === 'applied',
      everyMs: 1000,
    });
    expect((await waitFor(curlVersion, 60_000, 'curl /version with the default')).gitVersion).toMatch(
      /^v1\.34\./,
    );
  };

  it('runbook 8.4: HAProxy without NET_BIND_SERVICE, or as non-root: the pod is not Ready and the reason says Permission denied', async () => {
    await bindRefused(
      'without NET_BIND_SERVICE',
      '--set-json',
      'edge.securityContext.capabilities={"drop":["ALL"],"add":[]}',
    );
    await backToDefault();
    await bindRefused(
      'as non-root',
      '--set',
      'edge.securityContext.runAsUser=10001',
      '--set',
      'edge.securityContext.runAsNonRoot=true',
    );
    await backToDefault();
  });
});
