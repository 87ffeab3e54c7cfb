import { mkdir } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import type { KubeConfig } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import { type Config, renderOptionsOf } from '../config/env.js';
import { instanceMetrics } from '../metrics/instance-metrics.js';
import type { Metrics } from '../metrics/metrics.js';
import type { Provider } from '../providers/provider.js';
import { Reconciler } from '../reconcile/reconciler.js';
import { ClusterStore } from '../store/cluster-store.js';
import type { DesiredStore } from '../store/desired-store.js';
import type { KubeClusterStore } from '../store/kube-store.js';
import type { Topology } from '../topology/topology.js';
import { createConfiguredProvider } from '../wiring.js';
import type { FleetStore, Lane } from './fleet.js';
import type { InstanceSpec } from './instances.js';

/** How the service's parts for several instances and replicas are made from the configuration. */

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
  const { KubeClusterStore } = await import('../store/kube-store.js');
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
