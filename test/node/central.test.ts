import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { waitFor } from '../support/wait.js';
import { type SignedClient, signedClient } from '../support/webhook-client.js';
import {
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

// The chart's central shape on the real node: two adapter replicas (pod network) elect a leader, which drives
// the edge pod's HAProxy through its Data Plane API. No registry serves an image with the API, so this runs
// only when KUBEBYON_TEST_NODE_CENTRAL_IMAGE names a local one (HAProxy at /usr/local/sbin/haproxy and the API
// at /usr/local/bin/dataplaneapi, like haproxytech/haproxy-debian): it is imported into the node here.
const IMAGE = process.env.KUBEBYON_TEST_NODE_CENTRAL_IMAGE ?? '';
const run = promisify(execFile);
const NS = 'kubebyon-central';
const RELEASE = 'kubebyon-haproxy-adapter';
const VC_NS = 'vcluster-central';
const HOST = 'api.central.example.com';
const CHART = join(repo, 'charts', 'kubebyon-haproxy-adapter');

describe.skipIf(!IMAGE)(
  'the central shape on a real node: a standby takes over from a force-deleted leader',
  () => {
    const ctx = nodeContext();
    const kubectl = cli(ctx.kubectlBin, ctx.kubeconfig);
    const helm = cli(ctx.helmBin, ctx.kubeconfig);
    const secret = randomBytes(24).toString('hex');
    const [adapterRepo, adapterTag] = ctx.images.adapter.split(':') as [string, string];
    const [edgeRepo, edgeTag] = IMAGE.split(':') as [string, string];
    let webhook: SignedClient;
    const timings: Record<string, number> = {};
    const json = async (...args: string[]) => JSON.parse(await kubectl(...args, '-o', 'json'));
    const leaseHolder = async () =>
      (await json('-n', NS, 'get', 'lease', RELEASE)).spec?.holderIdentity as string | undefined;
    const body = (host: string) => ({
      control_plane_host: host,
      public_access_mode: 'loadbalancer',
      service: { namespace: VC_NS, name: 'demo', port: 443 },
    });

    beforeAll(async () => {
      const sock = join(ctx.nodeDir, 'run', 'containerd.sock');
      await run('sh', [
        '-c',
        `docker save '${IMAGE}' | ctr --address '${sock}' -n k8s.io images import - >/dev/null`,
      ]);
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
        `--from-literal=dataplane-password=${randomBytes(12).toString('hex')}`,
      );
      const pki = await servingCert(HOST);
      writeFileSync(
        join(pki.dir, 'tokens.csv'),
        `${randomBytes(24).toString('hex')},vc-admin,vc-admin,"system:masters"\n`,
      );
      await createVclusterPki(kubectl, VC_NS, pki.dir);
      await kubectl.withInput(
        JSON.stringify({
          apiVersion: 'v1',
          kind: 'List',
          items: [vclusterDeployment(VC_NS, ctx.images.vcluster), vclusterService(VC_NS)],
        }),
        'apply',
        '-f',
        '-',
      );
      const t = Date.now();
      await helm(
        'install',
        RELEASE,
        CHART,
        '-n',
        NS,
        ...chartSets({
          mode: 'central',
          imagePullPolicy: 'Never',
          'adapter.image.repository': adapterRepo,
          'adapter.image.tag': adapterTag,
          'edge.images.central.repository': edgeRepo,
          'edge.images.central.tag': edgeTag,
          'edge.bindAddress': `${ctx.nodeIp}:443`,
          'adapter.lease.durationMs': 6000,
          'adapter.lease.renewDeadlineMs': 4000,
          'adapter.lease.retryPeriodMs': 1000,
          'service.type': 'NodePort',
        }),
      );
      await waitFor(
        async () =>
          (await json('-n', NS, 'get', 'pods')).items.every(
            (p: { status: { conditions?: Array<{ type: string; status: string }> } }) =>
              p.status.conditions?.some((c) => c.type === 'Ready' && c.status === 'True'),
          ),
        180_000,
        'every pod of the release Ready',
        { everyMs: 1000 },
      );
      timings.chartInstalled = seconds(t);
      const port = (await json('-n', NS, 'get', 'service', RELEASE)).spec.ports[0].nodePort;
      webhook = signedClient(`http://${ctx.nodeIp}:${port}`, secret);
      await waitFor(
        async () => (await json('-n', VC_NS, 'get', 'deployment', 'demo')).status.readyReplicas === 1,
        120_000,
        'the vCluster Ready',
      );
    });

    afterAll(async () => {
      console.log(`[node] central timings (s): ${JSON.stringify(timings)}`);
      await helm('uninstall', RELEASE, '-n', NS, '--ignore-not-found', '--wait');
      await kubectl('delete', 'namespace', NS, VC_NS, '--ignore-not-found', '--wait=true');
    });

    it('routes the vCluster by SNI, then a standby leads within the lease after a forced delete of the leader during a burst', async () => {
      const t0 = Date.now();
      const res = await webhook.request('PUT', '/v1/clusters/demo?wait=true', body(HOST));
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      await waitFor(() => sniReaches(ctx.nodeIp, HOST), 30_000, 'the vCluster by SNI');
      timings.firstRouteApplied = seconds(t0);

      const pods = (
        await json('-n', NS, 'get', 'pods', '-l', 'app.kubernetes.io/component=adapter')
      ).items.map((p: { metadata: { name: string } }) => p.metadata.name) as string[];
      expect(pods).toHaveLength(2);
      const leader = await leaseHolder();
      const standby = pods.find((p) => p !== leader);
      expect(pods).toContain(leader);

      const acked: string[] = [];
      let failed = 0;
      let stop = false;
      const burst = (async () => {
        const start = Date.now();
        for (let i = 0; i < 400 && !stop && Date.now() - start < 180_000; i++) {
          const host = `c-${i}.central.example.com`;
          const answer = webhook.request('PUT', `/v1/clusters/c-${i}`, body(host)).then(
            (r) => r.status === 202,
            () => false,
          );
          const ok = await Promise.race([
            answer,
            new Promise<boolean>((r) => setTimeout(() => r(false), 10_000)),
          ]);
          if (ok) acked.push(host);
          else failed++;
          await new Promise((r) => setTimeout(r, 100));
        }
      })();
      await waitFor(() => acked.length >= 10, 60_000, '10 acknowledged changes');
      const t = Date.now();
      await kubectl('-n', NS, 'delete', 'pod', leader ?? '', '--grace-period=0', '--force');
      const next = await waitFor(leaseHolder, 60_000, 'another holder', { ok: (h) => !!h && h !== leader });
      timings.leaderTakeover = seconds(t);
      expect(next).toBe(standby);
      const before = acked.length;
      await waitFor(() => acked.length >= before + 10, 120_000, '10 more acknowledged after the takeover');
      stop = true;
      await burst;
      const hosts = [HOST, ...acked];
      const missing = await waitFor(
        async () => {
          const ok = await Promise.all(hosts.map((h) => sniReaches(ctx.nodeIp, h)));
          return hosts.filter((_, i) => !ok[i]);
        },
        120_000,
        'every acknowledged change routed',
        { ok: (m) => m.length === 0, everyMs: 500 },
      );
      timings.allRoutedAfterTakeover = seconds(t);
      expect(missing).toEqual([]);
      console.log(
        `[node] central forced delete: ${acked.length} acknowledged, ${failed} not; lease to ${next} after ${timings.leaderTakeover} s`,
      );
    });
  },
);
