import type { Server } from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import type { KubeConfig } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import type { Config } from './config/env.js';
import { Fleet } from './fleet/fleet.js';
import { discoveredInstances, type InstanceSpec, listedInstances } from './fleet/instances.js';
import type { LeaderElector } from './kube/leader-election.js';
import { createMetrics, type Metrics } from './metrics/metrics.js';
import type { Provider } from './providers/provider.js';
import type { DesiredStore } from './store/desired-store.js';
import type { KubeClusterStore } from './store/kube-store.js';
import type { HaproxyPods } from './topology/haproxy-pods.js';
import type { KubernetesTopology } from './topology/kubernetes.js';
import { createApp, DEFAULT_BODY_TIMEOUT_MS } from './webhook/app.js';
import { WebhookAuthenticator } from './webhook/auth.js';
import type { Readiness } from './webhook/readiness.js';
import { createWebhookServer, listen, serverTimes } from './webhook/server.js';

/** How long a scrape of /metrics waits for HAProxy's refusal counts before it answers without them. */
const REFUSALS_READ_MS = 2000;

import {
  createLogger,
  createTopology,
  laneFactory,
  type OpenedStore,
  openStore,
  startElection,
} from './wiring.js';

export const VERSION = '0.1.0';

export interface Service {
  /** Base URL of the webhook API, health and metrics. */
  url: string;
  store: DesiredStore;
  /** Every HAProxy instance's loop (none on a replica that does not lead). */
  fleet: Fleet<InstanceSpec>;
  metrics: Metrics;
  /** The leader election, when replicas share the state. */
  elector: LeaderElector | undefined;
  /** Stops accepting calls, answers the calls in flight (their changes applied), stops the loop and watches. */
  stop(): Promise<void>;
}

export interface ServiceDeps {
  /** Where plans are applied (tests): the one instance's provider. */
  provider?: Provider;
  logger?: Logger;
  /** The environment the configuration came from (Kubernetes credentials); by default the process's. */
  env?: NodeJS.ProcessEnv;
}

const PING_TIMEOUT_MS = 5_000;

function readinessOf(
  store: DesiredStore,
  auth: WebhookAuthenticator,
  fleet: Fleet<InstanceSpec>,
  elector: LeaderElector | undefined,
  kube: KubernetesTopology | undefined,
): () => Promise<Readiness> {
  return async () => {
    // Changes can be acknowledged only if both the store and the seen signatures can be written.
    const [stored, recorded] = await Promise.all([store.health(), auth.health()]);
    const checks: Readiness['checks'] = { state: stored.ok ? recorded : stored };
    // A standby is ready: it takes webhooks (stored for the leader) and answers status.
    if (elector)
      checks.leader = {
        ok: true,
        detail: fleet.isPublishing ? 'leading' : `standing by; leader: ${elector.leader() ?? 'none yet'}`,
      };
    Object.assign(checks, await fleet.health(PING_TIMEOUT_MS));
    Object.assign(checks, kube?.health() ?? {});
    return { ready: Object.values(checks).every((c) => c.ok), checks };
  };
}

/**
 * Stops taking calls, answers the calls in flight while the loop still runs (so that acknowledged changes
 * callers wait for get applied), then stops the loops within the grace period, hands leadership over, and
 * stops the watches.
 */
async function gracefulStop(
  parts: {
    server: Server;
    /** Requests received and not yet answered. */
    unanswered(): number;
    fleet: Fleet<InstanceSpec>;
    store: OpenedStore;
    elector: LeaderElector | undefined;
    closers: Array<(() => Promise<void>) | undefined>;
    logger: Logger;
  },
  graceMs: number,
): Promise<void> {
  const { server, unanswered, fleet, store, elector, closers, logger } = parts;
  const deadline = Date.now() + graceMs;
  logger.info('stopping: no new calls; answering the calls in flight');
  const closed = new Promise<void>((resolve) => server.close(() => resolve()));
  server.closeIdleConnections();
  while (unanswered() > 0 && Date.now() < deadline) await sleep(20);
  await fleet.stop(Math.max(0, deadline - Date.now()));
  server.closeAllConnections();
  // Released only once no lane can write and the last statuses are stored: a standby takes over at once
  // instead of after the lease.
  await store.flush?.();
  await elector?.stop();
  for (const close of closers) await close?.();
  await closed;
  logger.info('stopped');
}

/**
 * The composition root: opens the desired state, starts the topology, a loop per HAProxy instance (while
 * this replica leads) and the HTTP API, and reconciles at once (so a restart converges HAProxy to what was
 * accepted before it).
 */
export async function startService(config: Config, deps: ServiceDeps = {}): Promise<Service> {
  const logger = deps.logger ?? createLogger(config);
  const { single, specs } = listedInstances(config);
  const metrics = createMetrics({ perInstance: !single });
  const wiring = { logger, metrics, ...(deps.env ? { env: deps.env } : {}) };
  let kubeConfig: KubeConfig | undefined;
  const kc = async () => {
    const { loadKubeConfig } = await import('./topology/kubernetes.js');
    kubeConfig ??= loadKubeConfig(deps.env);
    return kubeConfig;
  };
  const { store, kube: kubeStore } = await openStore(config, { logger, kubeConfig: kc });
  let fleet: Fleet<InstanceSpec> | undefined;
  const { topology, kube } = await createTopology(config, (reason) => fleet?.nudge(reason), wiring);
  const election = config.fleet.leaderElection;
  let elector: LeaderElector | undefined;
  const makeLane = laneFactory(config, {
    store,
    topology,
    ...wiring,
    single,
    ...(deps.provider ? { given: deps.provider } : {}),
    // Checked right before each apply: a replica whose renewal is overdue writes nothing.
    ...(election?.apply === 'leader'
      ? { fence: () => (elector?.isLeader() ? undefined : 'this replica does not lead') }
      : {}),
  });
  const loops = new Fleet<InstanceSpec>({
    store,
    makeLane,
    logger,
    single,
    waitTimeoutMs: config.webhook.waitTimeoutMs,
  });
  fleet = loops;
  metrics.beforeScrape.refusals = async () => {
    const rows = await loops.refusals(AbortSignal.timeout(REFUSALS_READ_MS));
    metrics.refusedConnections.reset();
    for (const r of rows)
      metrics.refusedConnections.set(
        { cluster: r.cluster, host: r.host, ...(single ? {} : { haproxy: r.instance }) },
        r.count,
      );
  };
  // A change another replica stored: the leader applies it (its own writes come back too, and find nothing).
  store.onChange?.((clusters) => loops.nudge('webhook', { clusters }));
  const auth = await WebhookAuthenticator.open({
    mode: config.webhook.auth,
    secret: config.webhook.secret,
    replayWindowSeconds: config.webhook.replayWindowSeconds,
    replayFile: `${config.stateFile}.replay`,
  });
  const app = createApp({
    store,
    reconciler: loops,
    metrics,
    logger,
    auth,
    waitTimeoutMs: config.webhook.waitTimeoutMs,
    bodyLimitBytes: config.webhook.bodyLimitBytes,
    readiness: () => readinessOf(store, auth, loops, elector, kube)(),
    version: VERSION,
  });

  if (kube) await kube.start();
  const pods = await discoverInstances(config, loops, { ...wiring, kubeConfig: kc });
  if (!pods) {
    await loops.setTargets(specs);
    metrics.haproxyInstances.set(specs.length);
  }
  const { server, gate } = createWebhookServer(app, serverTimes(DEFAULT_BODY_TIMEOUT_MS));
  await listen(server, config.listen.host, config.listen.port);
  const address = server.address();
  const port = address && typeof address !== 'string' ? address.port : config.listen.port;
  const sweeper = kubeStore ? sweepTombstones(kubeStore, loops, logger) : undefined;
  elector = await startElection(config, loops, { logger, metrics, kubeConfig: kc });
  // HAProxy may be away at start: webhooks are still accepted and stored, and the loop converges later.
  // Discovered instances are logged as such, so they are not pinged for this line.
  const reached = pods ? [] : await loops.reach(PING_TIMEOUT_MS);
  const only = reached[0];
  logger.info(
    {
      provider: config.provider.kind,
      ...(single && only
        ? only.unreachable === undefined
          ? { haproxy: only.version, endpoint: only.endpoint }
          : { haproxy: null, unreachable: only.unreachable }
        : { instances: pods ? 'discovered' : reached }),
      leaderElection: election ? election.identity : false,
      store: config.fleet.store,
      listen: `${config.listen.host}:${port}`,
      clusters: store.list().length,
      topology: config.topology.kind,
    },
    'service started',
  );

  let stopping: Promise<void> | undefined;
  return {
    url: `http://${config.listen.host === '0.0.0.0' ? '127.0.0.1' : config.listen.host}:${port}`,
    store,
    fleet: loops,
    metrics,
    get elector() {
      return elector;
    },
    stop() {
      stopping ??= gracefulStop(
        {
          server,
          unanswered: gate.unanswered,
          fleet: loops,
          store,
          elector,
          closers: [
            sweeper,
            () => pods?.stop() ?? Promise.resolve(),
            kube && (() => kube.stop()),
            async () => store.close?.(),
          ],
          logger,
        },
        config.shutdownGraceMs,
      );
      return stopping;
    },
  };
}

/** HAProxy pods found by label, when configured: the instances follow them. */
async function discoverInstances(
  config: Config,
  fleet: Fleet<InstanceSpec>,
  deps: { logger: Logger; metrics: Metrics; kubeConfig: () => Promise<KubeConfig> },
): Promise<HaproxyPods | undefined> {
  const discovery = config.fleet.discovery;
  if (!discovery) return undefined;
  const { HaproxyPods } = await import('./topology/haproxy-pods.js');
  const pods = new HaproxyPods(
    await deps.kubeConfig(),
    discovery,
    (found) => {
      deps.metrics.haproxyInstances.set(found.length);
      void fleet.setTargets(discoveredInstances(config.provider, found));
    },
    deps.logger.child({ discovery: 'haproxy_pods' }),
    deps.metrics,
  );
  await pods.start();
  return pods;
}

/** The leader removes tombstones older than the replay window, once a minute. */
function sweepTombstones(
  store: KubeClusterStore,
  fleet: Fleet<InstanceSpec>,
  logger: Logger,
): () => Promise<void> {
  const timer = setInterval(() => {
    if (!fleet.isPublishing) return;
    store.sweepTombstones().catch((err: unknown) => logger.warn({ err }, 'sweeping tombstones failed'));
  }, 60_000);
  timer.unref();
  return async () => clearInterval(timer);
}
