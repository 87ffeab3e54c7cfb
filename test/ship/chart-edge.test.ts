import { chmodSync, chownSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { type Manifest, renderChart } from '../support/chart.js';
import { waitFor } from '../support/wait.js';
import { runProgram } from './built.js';

// The chart's sidecar edge pod, run with docker as the kubelet would run it: the two containers the chart
// renders (its images, command, files and security settings) in one network namespace of their own, sharing
// the emptyDir. Ports below 1024 are privileged there, as on a node (hostNetwork). With the chart's default
// HAProxy binds :443 and a change is applied; without NET_BIND_SERVICE, or as non-root, the bind is refused
// and the cluster's reason says so (runbook 8.4). Nothing leaves the pod: no network, calls through exec.

const SECRET = 'ship-chart-edge-secret-0123456789';
const PREFIX = `kubebyon-ship-chart-${process.pid}`;

// biome-ignore lint/suspicious/noExplicitAny: rendered objects are read as plain YAML documents
type Container = Record<string, any>;

/** docker run flags for a container's securityContext (and the pod's fsGroup), as the kubelet applies them. */
function securityFlags(sc: Container, fsGroup: number): string[] {
  const flags = ['--user', `${sc.runAsUser ?? 0}${sc.runAsGroup === undefined ? '' : `:${sc.runAsGroup}`}`];
  flags.push('--group-add', String(fsGroup));
  for (const cap of sc.capabilities?.drop ?? []) flags.push('--cap-drop', cap);
  for (const cap of sc.capabilities?.add ?? []) flags.push('--cap-add', cap);
  if (sc.readOnlyRootFilesystem) flags.push('--read-only');
  if (sc.allowPrivilegeEscalation === false) flags.push('--security-opt', 'no-new-privileges');
  return flags;
}

const docker = async (args: string[], timeoutMs = 60_000) => {
  const r = await runProgram('docker', args, { timeoutMs });
  if (r.code !== 0) throw new Error(`docker ${args[0]} failed (${r.code}): ${r.stderr}`);
  return r.stdout;
};

/** One edge pod from a rendering; `call` runs a signed request inside it; `stop` removes it. */
async function startEdgePod(name: string, args: string[]) {
  const objects = renderChart(['--set', 'mode=sidecar', ...args]);
  const edge = objects.find((o) => o.kind === 'DaemonSet') as Manifest;
  const cm = objects.find((o) => o.kind === 'ConfigMap') as Manifest;
  const pod = edge.spec.template.spec;
  const byName = (n: string) => pod.containers.find((c: Container) => c.name === n) as Container;
  const haproxy = byName('haproxy');
  const adapter = byName('adapter');
  const mount = (c: Container, volume: string) =>
    c.volumeMounts.find((m: { name: string }) => m.name === volume).mountPath as string;

  const dir = mkdtempSync(join(tmpdir(), `${name}-`));
  const etc = join(dir, 'etc');
  const run = join(dir, 'run');
  mkdirSync(etc);
  mkdirSync(run);
  for (const [file, text] of Object.entries(cm.data as Record<string, string>))
    writeFileSync(join(etc, file), text);
  // An emptyDir with the pod's fsGroup: world-writable, group fsGroup, setgid.
  chownSync(run, 0, pod.securityContext.fsGroup);
  chmodSync(run, 0o2777);

  const shared = [
    '-v',
    `${run}:${mount(haproxy, 'run')}`,
    '-v',
    `${etc}:${mount(haproxy, 'haproxy-config')}:ro`,
  ];
  await docker([
    'run',
    '-d',
    '--name',
    `${name}-haproxy`,
    '--network',
    'none',
    '--sysctl',
    'net.ipv4.ip_unprivileged_port_start=1024',
    ...securityFlags(haproxy.securityContext, pod.securityContext.fsGroup),
    '--tmpfs',
    mount(haproxy, 'haproxy-tmp'),
    ...shared,
    '--entrypoint',
    haproxy.command[0],
    haproxy.image,
    ...haproxy.command.slice(1),
  ]);
  // The adapter's own settings for this HAProxy as the chart renders them; the Kubernetes ones (store,
  // topology, Lease) replaced by the file store and one static node, since there is no API server here.
  const env = (adapter.env as Array<{ name: string; value?: string }>)
    .filter((e) => /^KUBEBYON_(PROVIDER|HAPROXY_|PUBLIC_PORT)/.test(e.name) && e.value !== undefined)
    .flatMap((e) => ['-e', `${e.name}=${e.value}`]);
  const uid = adapter.securityContext.runAsUser;
  await docker([
    'run',
    '-d',
    '--name',
    `${name}-adapter`,
    '--network',
    `container:${name}-haproxy`,
    ...securityFlags(adapter.securityContext, pod.securityContext.fsGroup),
    '--tmpfs',
    mount(adapter, 'tmp'),
    '--tmpfs',
    `${mount(adapter, 'state')}:uid=${uid},gid=${uid}`,
    ...shared.map((v) =>
      v
        .replace(mount(haproxy, 'run'), mount(adapter, 'run'))
        .replace(mount(haproxy, 'haproxy-config'), mount(adapter, 'haproxy-config')),
    ),
    ...env,
    '-e',
    `KUBEBYON_WEBHOOK_SECRET=${SECRET}`,
    '-e',
    'KUBEBYON_LISTEN_ADDR=127.0.0.1:8080',
    '-e',
    'KUBEBYON_TOPOLOGY=static',
    '-e',
    'KUBEBYON_STATIC_NODE_ADDRESSES=127.0.0.1',
    adapter.image,
    ...adapter.args,
  ]);
  /** Runs node in the adapter container (the pod's loopback): prints one JSON line. */
  const inPod = async (script: string) =>
    JSON.parse((await docker(['exec', `${name}-adapter`, '/usr/bin/node', '-e', script])).trim());
  return {
    /** A signed PUT ?wait=true of one cluster, and /readyz after it. */
    put: () =>
      inPod(`
const crypto = require('crypto');
const path = '/v1/clusters/demo?wait=true';
const body = JSON.stringify({ control_plane_host: 'api.demo.example.com', public_access_mode: 'loadbalancer', node_port: 31443 });
const ts = String(Math.floor(Date.now() / 1000));
const sig = crypto.createHmac('sha256', ${JSON.stringify(SECRET)}).update(ts + '\\nPUT\\n' + path + '\\n' + body).digest('hex');
(async () => {
  const put = await fetch('http://127.0.0.1:8080' + path, { method: 'PUT', body,
    headers: { 'content-type': 'application/json', 'x-kubebyon-timestamp': ts, 'x-kubebyon-signature': 'sha256=' + sig } });
  const ready = await fetch('http://127.0.0.1:8080/readyz');
  console.log(JSON.stringify({ status: put.status, body: await put.json(), ready: ready.status }));
})();`),
    /** Whether something accepts on the pod's :443. */
    accepts443: () =>
      inPod(`require('net').connect(443, '127.0.0.1')
  .on('connect', () => { console.log('true'); process.exit(0); })
  .on('error', () => { console.log('false'); process.exit(0); });`) as Promise<boolean>,
    /** The adapter answers /healthz. */
    healthy: () =>
      inPod(
        `fetch('http://127.0.0.1:8080/healthz').then((r) => console.log(r.ok), () => console.log(false));`,
      ).catch(() => false) as Promise<boolean>,
    haproxyLog: async () => (await runProgram('docker', ['logs', `${name}-haproxy`])).stderr,
    async stop() {
      await runProgram('docker', ['rm', '-f', `${name}-adapter`, `${name}-haproxy`]);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

type EdgePod = Awaited<ReturnType<typeof startEdgePod>>;

describe("the chart's sidecar edge pod, as the kubelet runs it", () => {
  const pods: EdgePod[] = [];
  const start = async (variant: string, args: string[]) => {
    const pod = await startEdgePod(`${PREFIX}-${variant}`, args);
    pods.push(pod);
    await waitFor(() => pod.healthy(), 120_000, `the ${variant} adapter to answer`);
    return pod;
  };

  afterAll(async () => {
    for (const pod of pods) await pod.stop();
  });

  it('binds :443 with the default securityContext and applies a change through the shared folder', async () => {
    const pod = await start('default', []);
    const put = await pod.put();
    expect(put.status, JSON.stringify(put.body)).toBe(200);
    expect(put.body.state).toBe('applied');
    expect(put.ready).toBe(200);
    expect(await pod.accepts443()).toBe(true);
  }, 240_000);

  it.each([
    ['without NET_BIND_SERVICE', ['--set', 'edge.securityContext.capabilities.add=null']],
    ['as a non-root user', ['--set', 'edge.securityContext.runAsUser=1000']],
  ])(
    'says "Permission denied" plainly when HAProxy runs %s (runbook 8.4)',
    async (_how, args) => {
      const pod = await start(_how.includes('root') ? 'nonroot' : 'nocap', args);
      const put = await pod.put();
      expect(put.status).toBe(502);
      expect(put.body.state).toBe('error');
      expect(put.body.reason).toMatch(
        /^HAProxy refused the new configuration and keeps the previous one: .*cannot bind socket \(Permission denied\) for \[0\.0\.0\.0:443\]/,
      );
      // Not ready (its HAProxy lacks the change): the pod leaves the webhook Service.
      expect(put.ready).toBe(503);
      expect(await pod.accepts443()).toBe(false);
      expect(await pod.haproxyLog()).toMatch(
        /cannot bind socket \(Permission denied\) for \[0\.0\.0\.0:443\]/,
      );
    },
    240_000,
  );
});
