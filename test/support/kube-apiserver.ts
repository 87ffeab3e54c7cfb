import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  ApiextensionsV1Api,
  CoordinationV1Api,
  KubeConfig,
  KubernetesObjectApi,
  loadAllYaml,
} from '@kubernetes/client-node';
import { chartRbac, clusterRouteCrd } from './chart.js';
import { waitFor } from './wait.js';

const SCRIPT = join(import.meta.dirname, '../../scripts/kube/run-apiserver.sh');

export interface KubeApiserver {
  env: Record<string, string>;
  /** system:masters: sets up the cluster. */
  admin: KubeConfig;
  /** The adapter's own identity: only what the chart's RBAC grants it. */
  adapter: KubeConfig;
  /** Stops kube-apiserver (etcd keeps the data) until `up()`. */
  down(): Promise<void>;
  up(): Promise<void>;
  stop(): Promise<void>;
}

function kubeConfig(env: Record<string, string>, token: string): KubeConfig {
  const kc = new KubeConfig();
  kc.loadFromOptions({
    clusters: [{ name: 'test', server: env.KUBE_APISERVER_URL ?? '', caFile: env.KUBE_CA_FILE ?? '' }],
    users: [{ name: 'user', token }],
    contexts: [{ name: 'ctx', cluster: 'test', user: 'user' }],
    currentContext: 'ctx',
  });
  return kc;
}

/**
 * A real etcd + kube-apiserver on loopback (RBAC, static tokens), from scripts/kube/run-apiserver.sh.
 * The adapter's token belongs to the ServiceAccount that the chart's RBAC binds (test/support/chart.ts).
 */
export async function startKubeApiserver(): Promise<KubeApiserver> {
  const dir = mkdtempSync(join(tmpdir(), 'kubebyon-kube-test-'));
  const runDir = join(dir, 'run');
  const child: ChildProcess = spawn('bash', [SCRIPT], {
    detached: true,
    stdio: ['ignore', 'ignore', 'inherit'],
    env: {
      ...process.env,
      KUBEBYON_KUBE_RUN_DIR: runDir,
      KUBEBYON_ADAPTER_USER: 'system:serviceaccount:kubebyon-system:kubebyon-haproxy-adapter',
    },
  });
  let exited = false;
  child.on('exit', () => {
    exited = true;
  });
  const envFile = join(runDir, 'env');
  const stateFile = join(runDir, 'apiserver.state');
  try {
    await waitFor(() => exited || existsSync(envFile), 300_000, 'kube-apiserver to become ready');
    if (exited) throw new Error('run-apiserver.sh exited before kube-apiserver was ready');
  } catch (err) {
    if (child.pid) process.kill(-child.pid, 'SIGKILL');
    rmSync(dir, { recursive: true, force: true });
    throw err;
  }
  const env = Object.fromEntries(
    readFileSync(envFile, 'utf8')
      .split('\n')
      .filter(Boolean)
      .map((line) => [line.slice(0, line.indexOf('=')), line.slice(line.indexOf('=') + 1)]),
  ) as Record<string, string>;
  const apiState = () => (existsSync(stateFile) ? readFileSync(stateFile, 'utf8').trim() : 'up');
  const signal = (sig: NodeJS.Signals) => {
    if (child.pid) process.kill(child.pid, sig);
  };
  return {
    env,
    admin: kubeConfig(env, env.KUBE_ADMIN_TOKEN ?? ''),
    adapter: kubeConfig(env, env.KUBE_ADAPTER_TOKEN ?? ''),
    async down() {
      signal('SIGUSR1');
      await waitFor(() => apiState() === 'down', 30_000, 'kube-apiserver to stop');
    },
    async up() {
      signal('SIGUSR2');
      await waitFor(() => apiState() === 'up', 120_000, 'kube-apiserver to come back');
    },
    async stop() {
      if (!exited && child.pid) {
        process.kill(-child.pid, 'SIGTERM');
        await waitFor(() => exited, 30_000, 'run-apiserver.sh to stop').catch(() => {
          if (child.pid) process.kill(-child.pid, 'SIGKILL');
        });
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** Creates the chart's RBAC objects (the adapter's ServiceAccount and its rights) as the admin. */
export async function applyChartRbac(kube: KubeApiserver): Promise<void> {
  const objects = kube.admin.makeApiClient(KubernetesObjectApi);
  for (const manifest of chartRbac()) await objects.create(manifest);
}

/** Applies the chart's ClusterRoute CRD (crds/) and waits until the API serves ClusterRoutes. */
export async function applyClusterRouteCrd(kube: KubeApiserver): Promise<void> {
  await kube.admin.makeApiClient(KubernetesObjectApi).create(clusterRouteCrd());
  const ext = kube.admin.makeApiClient(ApiextensionsV1Api);
  await waitFor(
    async () =>
      (
        await ext.readCustomResourceDefinition({ name: 'clusterroutes.kubebyon.io' })
      ).status?.conditions?.some((c) => c.type === 'Established' && c.status === 'True') ?? false,
    30_000,
    'the ClusterRoute CRD to be Established',
  );
}

/**
 * The API server as the chart leaves it for replicas led by a Lease: namespace `ns`, the ClusterRoute CRD and
 * the chart's RBAC; the adapter's kubeconfig written to `<dir>/kubeconfig`. Gives that path and a Lease client.
 */
export async function prepareForReplicas(
  kube: KubeApiserver,
  ns: string,
  dir: string,
): Promise<{ kubeconfig: string; leases: CoordinationV1Api }> {
  const objects = kube.admin.makeApiClient(KubernetesObjectApi);
  for (const manifest of loadAllYaml(`apiVersion: v1\nkind: Namespace\nmetadata: {name: ${ns}}\n`))
    await objects.create(manifest);
  await applyClusterRouteCrd(kube);
  await applyChartRbac(kube);
  const kubeconfig = join(dir, 'kubeconfig');
  writeFileSync(kubeconfig, kube.adapter.exportConfig());
  return { kubeconfig, leases: kube.admin.makeApiClient(CoordinationV1Api) };
}

/** Lease timings short enough for a test to see a takeover in seconds. */
export const TEST_LEASE = { duration: 3000, renew: 2000, retry: 250 };

/**
 * The settings of replica `id` led by a Lease, its desired state in the API server's namespace `ns`: its own
 * state folder under `stateDir` (made here), and `TEST_LEASE`'s timings.
 */
export function replicaSettings(
  id: string,
  stateDir: string,
  kubeconfig: string,
  ns: string,
): Record<string, string> {
  const dir = join(stateDir, id);
  mkdirSync(dir, { recursive: true });
  return {
    KUBEBYON_STATE_FILE: join(dir, 'clusters.json'),
    KUBEBYON_STATE_STORE: 'kubernetes',
    KUBEBYON_KUBERNETES_NAMESPACE: ns,
    KUBECONFIG: kubeconfig,
    KUBEBYON_LEADER_ELECTION_ID: id,
    KUBEBYON_LEASE_DURATION_MS: String(TEST_LEASE.duration),
    KUBEBYON_LEASE_RENEW_DEADLINE_MS: String(TEST_LEASE.renew),
    KUBEBYON_LEASE_RETRY_PERIOD_MS: String(TEST_LEASE.retry),
  };
}
