import { mkdir } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import type { KubeConfig } from '@kubernetes/client-node';
import pino, { type Logger } from 'pino';
import { type Config, renderOptionsOf } from './config/env.js';
import type { Fleet, FleetStore, Lane } from './fleet/fleet.js';
import type { InstanceSpec } from './fleet/instances.js';
import type { LeaderElector } from './kube/leader-election.js';
import { instanceMetrics } from './metrics/instance-metrics.js';
import type { Metrics } from './metrics/metrics.js';
import { createProvider } from './providers/index.js';
import type { Provider } from './providers/provider.js';
import { Reconciler } from './reconcile/reconciler.js';
import { OwnedProvider } from './registry/owned-provider.js';
import { Registry } from './registry/registry.js';
import { ClusterStore } from './store/cluster-store.js';
import type { DesiredStore } from './store/desired-store.js';
import type { KubeClusterStore } from './store/kube-store.js';
import type { KubernetesTopology } from './topology/kubernetes.js';
import { StaticTopology, type Topology } from './topology/topology.js';

/**
 * How a configuration becomes the service's parts: a logger, a topology, the desired-state store, and for
 * each HAProxy instance a lane (its provider behind the registry, and its own loop). One wiring for `serve`
 * (`service.ts`, the composition root) and for the passes the command line runs, so that both talk to the
 * same HAProxy and Kubernetes in the same way.
 */

/** JSON logs on standard output, or on the file descriptor given (the command line logs to stderr). */
export function createLogger(config: Pick<Config, 'logLevel'>, fd?: number): Logger {
  // Secrets never reach the log: credentials are only in headers and config, both redacted here.
  const options: pino.LoggerOptions = {
    level: config.logLevel,
    base: { service: 'kubebyon-haproxy-adapter' },
    redact: [
      'req.headers.authorization',
      'req.headers["x-kubebyon-signature"]',
      'config.webhook.secret',
      'config.provider.password',
    ],
  };
  return fd === undefined ? pino(options) : pino(options, pino.destination({ fd, sync: true }));
}

export interface WiringDeps {
  logger: Logger;
  metrics: Metrics;
  /** The environment the configuration came from: Kubernetes credentials are looked up in it too. */
  env?: NodeJS.ProcessEnv;
}

/**
 * The topology the configuration names. A Kubernetes one is returned unstarted (as `kube` too, for its
 * start, stop and health); `onChange` hears of changes that matter to routing. The Kubernetes client is
 * loaded only here, when the topology needs it: a static setup never holds it in memory.
 */
export async function createTopology(
  config: Config,
  onChange: (reason: string) => void,
  deps: WiringDeps,
): Promise<{ topology: Topology; kube: KubernetesTopology | undefined }> {
  if (config.topology.kind !== 'kubernetes') {
    return { topology: new StaticTopology(config.topology.nodeAddresses), kube: undefined };
  }
  const { KubernetesTopology, loadKubeConfig } = await import('./topology/kubernetes.js');
  const kube = new KubernetesTopology(
    loadKubeConfig(deps.env),
    { addressType: config.haproxy.nodeAddressType, excludeNotReady: config.topology.excludeNotReady },
    onChange,
    deps.metrics,
    deps.logger,
  );
  return { topology: kube, kube };
}

/**
 * The provider the configuration names (or the one `given`, for tests), its traffic counted in `metrics`,
 * behind the registry of the configured owner id: no plan reaches a provider unchecked. Only the service
 * keeps the provider's files beside the state file (`keepsFiles`): only the service sweeps what an older
 * release left there (the Data Plane API's transaction ledger), never a pass run by hand beside it.
 */
export async function createConfiguredProvider(
  config: Config,
  deps: WiringDeps & {
    keepsFiles: boolean;
    given?: Provider;
    /** Where the provider keeps its files, when not beside the state file (one folder per instance). */
    stateDir?: string;
    /** Asked before each apply (leader election): a reason refuses the plan. */
    fence?: () => string | undefined;
  },
): Promise<OwnedProvider> {
  const registry = new Registry(config.ownerId);
  if (deps.given) return new OwnedProvider(deps.given, registry, deps.fence);
  const label = { provider: config.provider.kind };
  const provider = await createProvider(config.provider, {
    logger: deps.logger,
    owner: registry,
    ...(deps.keepsFiles ? { stateDir: deps.stateDir ?? dirname(config.stateFile) } : {}),
    persistDelayMs: config.persistDelayMs,
    traffic: {
      request: () => deps.metrics.providerRequests.inc(label),
      bytes: (direction, n) => deps.metrics.providerBytes.inc({ ...label, direction }, n),
    },
  });
  return new OwnedProvider(provider, registry, deps.fence);
}

/** A tombstone outlives the replay window, so that no replayed write can come after it is gone. */
const TOMBSTONE_MARGIN_MS = 60_000;

export type OpenedStore = DesiredStore &
  FleetStore & {
    onChange?(listener: (names: string[]) => void): void;
    /** Waits for status writes under way. */
    flush?(): Promise<void>;
    close?(): Promise<void>;
  };

/** The desired state: the local file, or ClusterRoute objects shared by every replica. */
export async function openStore(
  config: Config,
  deps: { logger: Logger; kubeConfig: () => Promise<KubeConfig> },
): Promise<{ store: OpenedStore; kube: KubeClusterStore | undefined }> {
  if (config.fleet.store === 'file')
    return { store: await ClusterStore.open(config.stateFile), kube: undefined };
  const { KubeClusterStore } = await import('./store/kube-store.js');
  const kube = await KubeClusterStore.open(await deps.kubeConfig(), {
    namespace: config.fleet.namespace,
    logger: deps.logger.child({ store: 'kubernetes' }),
    tombstoneMs: config.webhook.replayWindowSeconds * 1000 + TOMBSTONE_MARGIN_MS,
  });
  return { store: kube, kube };
}

export interface LaneDeps {
  store: Pick<DesiredStore, 'list' | 'get'>;
  topology: Topology;
  metrics: Metrics;
  logger: Logger;
  env?: NodeJS.ProcessEnv;
  /** One instance, named by the provider's own settings: metrics and files as before, unlabelled. */
  single: boolean;
  /** A provider handed in (tests): the one instance's. */
  given?: Provider;
  fence?: () => string | undefined;
}

/**
 * An instance's lane: its provider (behind the registry, and the fence when replicas elect a leader), its
 * own loop, metrics labelled with its name and files in a folder of its own when there are several.
 */
export function laneFactory(
  config: Config,
  deps: LaneDeps,
): (target: InstanceSpec, passed: (clusters: ReadonlySet<string> | 'all') => void) => Promise<Lane> {
  return async (target, passed) => {
    const view = deps.single ? undefined : instanceMetrics(deps.metrics, target.name);
    const metrics = view?.metrics ?? deps.metrics;
    const logger = deps.single ? deps.logger : deps.logger.child({ haproxy: target.name });
    const stateDir = deps.single ? undefined : join(dirname(config.stateFile), 'instances', target.name);
    if (stateDir) await mkdir(stateDir, { recursive: true });
    const provider = await createConfiguredProvider(
      { ...config, provider: target.provider },
      {
        logger,
        metrics,
        ...(deps.env ? { env: deps.env } : {}),
        keepsFiles: true,
        ...(stateDir ? { stateDir } : {}),
        // A provider handed in is the one instance's: never shared by several lanes.
        ...(deps.given && deps.single ? { given: deps.given } : {}),
        ...(deps.fence ? { fence: deps.fence } : {}),
      },
    );
    const loop = new Reconciler({
      store: deps.store,
      topology: deps.topology,
      provider,
      render: { ...renderOptionsOf(config.haproxy), ...(target.bind ? { bind: target.bind } : {}) },
      metrics,
      logger,
      ...config.reconcile,
      publicPort: config.publicPort,
      passed,
    });
    loop.start();
    return {
      loop,
      ping: (signal) => provider.ping(signal),
      async close(graceMs, persist) {
        await loop.stop(graceMs);
        await provider.close({ persist });
        view?.dispose();
      },
    };
  };
}

/**
 * The Lease, when replicas elect a leader (otherwise this replica leads alone). With `apply: leader` the
 * holder alone applies and publishes: its lanes run while it leads. With `apply: always` (the sidecar shape,
 * an HAProxy beside each replica) every replica applies to its own HAProxy from the start, and the holder
 * only publishes ClusterRoute statuses and sweeps tombstones: one writer of each status.
 */
export async function startElection(
  config: Config,
  loops: Pick<Fleet<InstanceSpec>, 'lead' | 'standby' | 'setPublishing'>,
  deps: { logger: Logger; metrics: Metrics; kubeConfig: () => Promise<KubeConfig> },
): Promise<LeaderElector | undefined> {
  const { metrics } = deps;
  const election = config.fleet.leaderElection;
  if (!election) {
    metrics.leader.set(1);
    await loops.lead();
    return undefined;
  }
  const always = election.apply === 'always';
  if (always) await loops.lead({ publish: false });
  const { LeaderElector } = await import('./kube/leader-election.js');
  const elector = new LeaderElector(
    { namespace: config.fleet.namespace, name: election.leaseName, ...election },
    {
      kubeConfig: await deps.kubeConfig(),
      logger: deps.logger,
      callbacks: {
        onStartedLeading: () => {
          metrics.leader.set(1);
          metrics.leaderTransitions.inc({ change: 'started' });
          if (always) loops.setPublishing(true);
          else void loops.lead();
        },
        onStoppedLeading: () => {
          metrics.leader.set(0);
          metrics.leaderTransitions.inc({ change: 'stopped' });
          if (always) loops.setPublishing(false);
          else void loops.standby();
        },
      },
    },
  );
  elector.start();
  return elector;
}
