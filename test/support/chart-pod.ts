import { execFile } from 'node:child_process';
import { chmodSync, chownSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type Manifest, renderChart } from './chart.js';

/**
 * One of the chart's edge pods run with docker as the kubelet would run it: the HAProxy container the chart
 * renders (its image, command, files, environment and security settings) and an adapter container, in one
 * network namespace of their own (no network: calls go through `docker exec`), sharing the emptyDir. Ports
 * below 1024 are privileged there, as on a node (hostNetwork). The adapter's Kubernetes settings (store,
 * topology, Lease, pod discovery) are replaced by the file store, one static node and, in the central shape,
 * the Data Plane API of this pod: there is no API server here.
 */

export const SECRET = 'chart-pod-secret-0123456789';
const DATAPLANE_PASSWORD = 'chart-pod-dataplane-password';

// biome-ignore lint/suspicious/noExplicitAny: rendered objects are read as plain YAML documents
type Container = Record<string, any>;
type Env = {
  name: string;
  value?: string;
  valueFrom?: { fieldRef?: { fieldPath: string }; secretKeyRef?: { key: string } };
};

function docker(
  args: string[],
  timeoutMs = 60_000,
): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile('docker', args, { timeout: timeoutMs, maxBuffer: 16 * 1024 * 1024 }, (err, stdout, stderr) =>
      resolve({ code: err ? Number((err as { code?: unknown }).code ?? 1) || 1 : 0, stdout, stderr }),
    );
  });
}

async function mustDocker(args: string[]): Promise<string> {
  const r = await docker(args);
  if (r.code !== 0) throw new Error(`docker ${args[0]} failed (${r.code}): ${r.stderr}`);
  return r.stdout;
}

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

/** A container's environment as the kubelet resolves it in this pod (fieldRefs, the Secret's keys). */
function resolvedEnv(c: Container, podName: string): string[] {
  const fields: Record<string, string> = { 'metadata.name': podName, 'status.podIP': '127.0.0.1' };
  const secrets: Record<string, string> = {
    'webhook-secret': SECRET,
    'dataplane-password': DATAPLANE_PASSWORD,
  };
  return ((c.env ?? []) as Env[]).flatMap((e) => {
    const from = e.valueFrom;
    const value = from?.fieldRef
      ? fields[from.fieldRef.fieldPath]
      : from?.secretKeyRef
        ? secrets[from.secretKeyRef.key]
        : e.value;
    return value === undefined ? [] : ['-e', `${e.name}=${value}`];
  });
}

export interface EdgePodOptions {
  /** `helm template` arguments (the shape, values under test). */
  args: string[];
  /** Replaces the HAProxy image the chart names (a stand-in), with extra `-v` mounts for it. */
  haproxyImage?: string;
  haproxyMounts?: string[];
}

export type EdgePod = Awaited<ReturnType<typeof startEdgePod>>;

export async function startEdgePod(name: string, o: EdgePodOptions) {
  const objects = renderChart(o.args);
  const edge = objects.find((x) => x.metadata?.name?.endsWith('-edge') && x.spec?.template) as Manifest;
  const cm = objects.find((x) => x.kind === 'ConfigMap') as Manifest;
  // The central shape's adapters are a Deployment apart from the edge; the sidecar's are in the edge pod.
  const adapterDeployment = objects.find(
    (x) => x.kind === 'Deployment' && !x.metadata?.name?.endsWith('-edge'),
  );
  const central = adapterDeployment !== undefined;
  const pod = edge.spec.template.spec;
  const fsGroup = pod.securityContext.fsGroup as number;
  const haproxy = pod.containers.find((c: Container) => c.name === 'haproxy') as Container;
  const adapterPod = central ? adapterDeployment.spec.template.spec : pod;
  const adapter = adapterPod.containers.find((c: Container) => c.name === 'adapter') as Container;
  const mount = (c: Container, volume: string) =>
    c.volumeMounts.find((m: { name: string }) => m.name === volume)?.mountPath as string;

  const dir = mkdtempSync(join(tmpdir(), `${name}-`));
  const etc = join(dir, 'etc');
  const run = join(dir, 'run');
  mkdirSync(etc);
  mkdirSync(run);
  for (const [file, text] of Object.entries(cm.data as Record<string, string>))
    writeFileSync(join(etc, file), text);
  // An emptyDir with the pod's fsGroup: world-writable, group fsGroup, setgid.
  chownSync(run, 0, fsGroup);
  chmodSync(run, 0o2777);
  const runAt = mount(haproxy, 'run');
  const etcAt = mount(haproxy, 'haproxy-config');

  await mustDocker([
    'run',
    '-d',
    '--name',
    `${name}-haproxy`,
    '--network',
    'none',
    '--sysctl',
    'net.ipv4.ip_unprivileged_port_start=1024',
    ...securityFlags(haproxy.securityContext, fsGroup),
    '--tmpfs',
    mount(haproxy, 'haproxy-tmp'),
    '-v',
    `${run}:${runAt}`,
    '-v',
    `${etc}:${etcAt}:ro`,
    ...(o.haproxyMounts ?? []),
    ...resolvedEnv(haproxy, `${name}-haproxy`),
    '--entrypoint',
    haproxy.command[0],
    o.haproxyImage ?? haproxy.image,
    ...haproxy.command.slice(1),
  ]);
  const own = central
    ? [
        'KUBEBYON_PROVIDER=dataplaneapi',
        `KUBEBYON_DATAPLANE_URL=http://127.0.0.1:${envValue(haproxy, 'DATAPLANE_PORT')}`,
        `KUBEBYON_DATAPLANE_USERNAME=${envValue(haproxy, 'DATAPLANE_USERNAME')}`,
        `KUBEBYON_DATAPLANE_PASSWORD=${DATAPLANE_PASSWORD}`,
      ]
    : [];
  // The adapter's own settings for HAProxy as the chart renders them.
  const rendered = ((adapter.env ?? []) as Env[])
    .filter((e) => /^KUBEBYON_(PROVIDER|HAPROXY_|PUBLIC_PORT)/.test(e.name) && e.value !== undefined)
    .filter((e) => !(central && e.name === 'KUBEBYON_HAPROXY_POD_SELECTOR'))
    .map((e) => `${e.name}=${e.value}`);
  const uid = adapter.securityContext.runAsUser;
  await mustDocker([
    'run',
    '-d',
    '--name',
    `${name}-adapter`,
    '--network',
    `container:${name}-haproxy`,
    ...securityFlags(adapter.securityContext, fsGroup),
    '--tmpfs',
    mount(adapter, 'tmp'),
    '--tmpfs',
    `${mount(adapter, 'state')}:uid=${uid},gid=${uid}`,
    ...(central
      ? []
      : ['-v', `${run}:${mount(adapter, 'run')}`, '-v', `${etc}:${mount(adapter, 'haproxy-config')}:ro`]),
    ...[...rendered, ...own].flatMap((kv) => ['-e', kv]),
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

  /** Runs node in the adapter container (the pod's loopback): prints one JSON value. */
  const inPod = async (script: string) =>
    JSON.parse((await mustDocker(['exec', `${name}-adapter`, '/usr/bin/node', '-e', script])).trim());
  return {
    central,
    /** A signed PUT ?wait=true of one cluster, and /readyz after it. */
    put: (): Promise<{ status: number; body: Record<string, unknown>; ready: number }> =>
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
    accepts443: (): Promise<boolean> =>
      inPod(`require('net').connect(443, '127.0.0.1')
  .on('connect', () => { console.log('true'); process.exit(0); })
  .on('error', () => { console.log('false'); process.exit(0); });`),
    /** The adapter answers /healthz. */
    healthy: (): Promise<boolean> =>
      inPod(
        `fetch('http://127.0.0.1:8080/healthz').then((r) => console.log(r.ok), () => console.log(false));`,
      ).catch(() => false),
    haproxyLog: async () => (await docker(['logs', `${name}-haproxy`])).stderr,
    async stop() {
      await docker(['rm', '-f', `${name}-adapter`, `${name}-haproxy`]);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

function envValue(c: Container, name: string): string {
  return ((c.env ?? []) as Env[]).find((e) => e.name === name)?.value ?? '';
}
