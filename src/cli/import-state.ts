import { delimiter } from 'node:path';
import type { KubeConfig } from '@kubernetes/client-node';
import { type Config, ConfigError, ENV_DEFAULTS } from '../config/env.js';
import { fleetConfigOf } from '../config/fleet-env.js';
import type { ClusterRecord } from '../model/cluster.js';
import { errorText } from '../model/errors.js';
import { ClusterStore } from '../store/cluster-store.js';
import type { KubeClusterStore } from '../store/kube-store.js';
import { createLogger } from '../wiring.js';
import type { Output } from './output.js';
import type { CliDeps } from './pass.js';

const COMMAND = 'import-state';
/** How long the first answer of the API server (the probe, then the store's first list) may take. */
const KUBE_TIMEOUT_MS = 15_000;
/** Nothing is swept here: a tombstone's lifetime only matters to a running service. */
const UNUSED_TOMBSTONE_MS = 360_000;
const LOG_LEVELS: ReadonlySet<string> = new Set<Config['logLevel']>([
  'fatal',
  'error',
  'warn',
  'info',
  'debug',
  'trace',
  'silent',
]);

/**
 * `import-state <file>`: moves a state file (`ClusterStore`'s snapshot and journal) into ClusterRoute objects
 * in KUBEBYON_KUBERNETES_NAMESPACE, each keeping its claim; clusters already there are left alone, so it can
 * be run again. Needs only the Kubernetes credentials and the namespace (no webhook secret, no HAProxy).
 */
export async function importStateCommand(
  file: string,
  env: NodeJS.ProcessEnv,
  io: Output,
  deps: CliDeps = {},
): Promise<number> {
  const settings = settingsOf(env);
  if (settings instanceof ConfigError) {
    io.err(`${COMMAND}: ${settings.message}`);
    return 1;
  }
  const { namespace, logLevel } = settings;
  // The file first: a mistyped path is said before Kubernetes is asked anything.
  let records: ClusterRecord[];
  try {
    records = await ClusterStore.read(file);
  } catch (err) {
    io.err(
      `${COMMAND}: ${(err as NodeJS.ErrnoException).code === 'ENOENT' ? `no state file at ${file}` : errorText(err)}`,
    );
    return 1;
  }
  const logger = deps.logger ?? createLogger({ logLevel }, 2);
  // Loaded here, not with the command line: the other commands do without the Kubernetes client.
  const kubeStore = await import('../store/kube-store.js');
  let kc: KubeConfig;
  try {
    kc = await kubeConfigOf(env);
  } catch (err) {
    io.err(`${COMMAND}: cannot load the Kubernetes credentials: ${errorText(err)}`);
    return 1;
  }
  const problem = await probe(kc, namespace);
  if (problem) {
    io.err(`${COMMAND}: ${problem}`);
    return 1;
  }
  let store: KubeClusterStore;
  try {
    store = await kubeStore.KubeClusterStore.open(kc, {
      namespace,
      logger,
      tombstoneMs: UNUSED_TOMBSTONE_MS,
      syncTimeoutMs: KUBE_TIMEOUT_MS,
    });
  } catch (err) {
    io.err(`${COMMAND}: cannot list ClusterRoutes in namespace ${namespace}: ${errorText(err)}`);
    return 1;
  }
  try {
    const { importStateFile } = await import('../store/import-state.js');
    const { imported, skipped } = await importStateFile(file, store);
    io.out(`imported ${imported}, skipped ${skipped} (already there)`);
    return 0;
  } catch (err) {
    const { describeError } = await import('../kube/errors.js');
    io.err(
      `${COMMAND}: importing ${records.length} cluster(s) into namespace ${namespace} failed: ${describeError(err)}` +
        ' (the clusters created before it stay; run the command again for the rest)',
    );
    return 1;
  } finally {
    await store.close();
  }
}

/** The two settings the command reads, checked by the service's own rules. */
function settingsOf(
  env: NodeJS.ProcessEnv,
): { namespace: string; logLevel: Config['logLevel'] } | ConfigError {
  const problems: string[] = [];
  // Only the namespace is taken from the environment: every other fleet setting stays at its default, so
  // the service's other variables (its provider, its instances) neither matter nor can be wrong here.
  const fleet = fleetConfigOf(
    { ...ENV_DEFAULTS, KUBEBYON_KUBERNETES_NAMESPACE: env.KUBEBYON_KUBERNETES_NAMESPACE ?? '' },
    'memory',
    problems,
    () => COMMAND,
  );
  const level = env.KUBEBYON_LOG_LEVEL || 'warn';
  if (!LOG_LEVELS.has(level))
    problems.push(`KUBEBYON_LOG_LEVEL: must be one of ${[...LOG_LEVELS].join(', ')}`);
  if (!fleet || problems.length > 0) return new ConfigError(problems);
  return { namespace: fleet.namespace, logLevel: level as Config['logLevel'] };
}

/**
 * Credentials as the service finds them (its pod's service account, else ~/.kube/config), except that a
 * KUBECONFIG in the command's environment comes first, as with kubectl.
 */
async function kubeConfigOf(env: NodeJS.ProcessEnv): Promise<KubeConfig> {
  const files = (env.KUBECONFIG ?? '').split(delimiter).filter(Boolean);
  const { loadKubeConfig } = await import('../topology/kubernetes.js');
  const first = files[0];
  if (first === undefined) return loadKubeConfig(env);
  const { KubeConfig } = await import('@kubernetes/client-node');
  const kc = new KubeConfig();
  kc.loadFromFile(first);
  for (const more of files.slice(1)) {
    const next = new KubeConfig();
    next.loadFromFile(more);
    kc.mergeConfig(next, true);
  }
  return kc;
}

/**
 * One list of ClusterRoutes, to say plainly what is missing: the store's own list would retry for its whole
 * timeout and end with a bare status code. Resolves with the problem, or undefined.
 */
async function probe(kc: KubeConfig, namespace: string): Promise<string | undefined> {
  const { CustomObjectsApi } = await import('@kubernetes/client-node');
  const { GROUP, PLURAL, VERSION } = await import('../store/kube-route.js');
  const { describeError } = await import('../kube/errors.js');
  const api = kc.makeApiClient(CustomObjectsApi);
  const base = { group: GROUP, version: VERSION, namespace, plural: PLURAL };
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<'timeout'>((resolve) => {
    timer = setTimeout(() => resolve('timeout'), KUBE_TIMEOUT_MS);
  });
  try {
    const answer = await Promise.race([api.listNamespacedCustomObject({ ...base, limit: 1 }), timeout]);
    if (answer === 'timeout') return `the Kubernetes API server did not answer within ${KUBE_TIMEOUT_MS} ms`;
    return undefined;
  } catch (err) {
    const status = Number((err as { code?: unknown }).code);
    if (status === 404)
      return `the ClusterRoute CRD (${PLURAL}.${GROUP}/${VERSION}) is not installed: install the chart charts/kubebyon-haproxy-adapter (its crds/)`;
    if (status === 401 || status === 403)
      return `not allowed to list ClusterRoutes in namespace ${namespace} (${describeError(err)}): run it as the chart's ServiceAccount, or with credentials that may`;
    return `cannot reach the Kubernetes API server: ${describeError(err)}`;
  } finally {
    clearTimeout(timer);
  }
}
