import type { Server } from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Logger } from 'pino';
import { type Config, renderOptionsOf } from './config/env.js';
import { createMetrics, type Metrics } from './metrics/metrics.js';
import { errorText, type Provider } from './providers/provider.js';
import { Reconciler } from './reconcile/reconciler.js';
import { ClusterStore } from './store/cluster-store.js';
import type { KubernetesTopology } from './topology/kubernetes.js';
import { createApp, DEFAULT_BODY_TIMEOUT_MS } from './webhook/app.js';
import { WebhookAuthenticator } from './webhook/auth.js';
import type { Readiness } from './webhook/readiness.js';
import { createWebhookServer, listen, serverTimes } from './webhook/server.js';
import { createConfiguredProvider, createLogger, createTopology } from './wiring.js';

export const VERSION = '0.1.0';

export interface Service {
  /** Base URL of the webhook API, health and metrics. */
  url: string;
  store: ClusterStore;
  reconciler: Reconciler;
  metrics: Metrics;
  provider: Provider;
  /** Stops accepting calls, answers the calls in flight (their changes applied), stops the loop and watches. */
  stop(): Promise<void>;
}

export interface ServiceDeps {
  /** Where plans are applied; by default the provider the configuration names. */
  provider?: Provider;
  logger?: Logger;
  /** The environment the configuration came from (Kubernetes credentials); by default the process's. */
  env?: NodeJS.ProcessEnv;
}

const PING_TIMEOUT_MS = 5_000;

function readinessOf(
  store: ClusterStore,
  auth: WebhookAuthenticator,
  provider: Provider,
  loop: Reconciler,
  kube: KubernetesTopology | undefined,
): () => Promise<Readiness> {
  return async () => {
    // Changes can be acknowledged only if both the store and the seen signatures can be written.
    const [stored, recorded] = await Promise.all([store.health(), auth.health()]);
    const checks: Readiness['checks'] = { state: stored.ok ? recorded : stored };
    try {
      await provider.ping(AbortSignal.timeout(PING_TIMEOUT_MS));
      checks.haproxy = { ok: true };
    } catch (err) {
      checks.haproxy = { ok: false, detail: errorText(err) };
    }
    const lastError = loop.lastError;
    checks.reconcile = !loop.ready
      ? { ok: false, detail: lastError ?? 'no reconcile has succeeded yet' }
      : lastError
        ? { ok: false, detail: lastError }
        : { ok: true };
    Object.assign(checks, kube?.health() ?? {});
    return { ready: Object.values(checks).every((c) => c.ok), checks };
  };
}

/**
 * Stops taking calls, answers the calls in flight while the loop still runs (so that acknowledged changes
 * callers wait for get applied), then stops the loop within the grace period, the watches and the provider.
 */
async function gracefulStop(
  parts: {
    server: Server;
    /** Requests received and not yet answered. */
    unanswered(): number;
    loop: Reconciler;
    kube: KubernetesTopology | undefined;
    provider: Provider;
    logger: Logger;
  },
  graceMs: number,
): Promise<void> {
  const { server, unanswered, loop, kube, provider, logger } = parts;
  const deadline = Date.now() + graceMs;
  logger.info('stopping: no new calls; answering the calls in flight');
  const closed = new Promise<void>((resolve) => server.close(() => resolve()));
  server.closeIdleConnections();
  while (unanswered() > 0 && Date.now() < deadline) await sleep(20);
  await loop.stop(Math.max(0, deadline - Date.now()));
  server.closeAllConnections();
  await kube?.stop();
  await provider.close?.();
  await closed;
  logger.info('stopped');
}

/**
 * The composition root: opens the desired state, starts the topology, the reconcile loop and the HTTP API,
 * and reconciles at once (so a restart converges HAProxy to what was accepted before it).
 */
export async function startService(config: Config, deps: ServiceDeps = {}): Promise<Service> {
  const logger = deps.logger ?? createLogger(config);
  const metrics = createMetrics();
  const store = await ClusterStore.open(config.stateFile);
  const wiring = { logger, metrics, ...(deps.env ? { env: deps.env } : {}) };
  // Every provider, given or made, goes behind the registry: no plan reaches it unchecked.
  const provider = await createConfiguredProvider(config, {
    ...wiring,
    keepsFiles: true,
    ...(deps.provider ? { given: deps.provider } : {}),
  });
  let reconciler: Reconciler | undefined;
  const { topology, kube } = await createTopology(
    config,
    (reason) => void reconciler?.request(reason),
    wiring,
  );
  const loop = new Reconciler({
    store,
    topology,
    provider,
    render: renderOptionsOf(config.haproxy),
    metrics,
    logger,
    ...config.reconcile,
    publicPort: config.publicPort,
  });
  reconciler = loop;
  const auth = await WebhookAuthenticator.open({
    mode: config.webhook.auth,
    secret: config.webhook.secret,
    replayWindowSeconds: config.webhook.replayWindowSeconds,
    replayFile: `${config.stateFile}.replay`,
  });
  const app = createApp({
    store,
    reconciler: loop,
    metrics,
    logger,
    auth,
    waitTimeoutMs: config.webhook.waitTimeoutMs,
    bodyLimitBytes: config.webhook.bodyLimitBytes,
    readiness: readinessOf(store, auth, provider, loop, kube),
    version: VERSION,
  });

  if (kube) await kube.start();
  const { server, gate } = createWebhookServer(app, serverTimes(DEFAULT_BODY_TIMEOUT_MS));
  await listen(server, config.listen.host, config.listen.port);
  const address = server.address();
  const port = address && typeof address !== 'string' ? address.port : config.listen.port;
  // HAProxy may be away at start: webhooks are still accepted and stored, and the loop converges later.
  const reached = await provider.ping(AbortSignal.timeout(PING_TIMEOUT_MS)).then(
    (info) => ({ haproxy: info.version, endpoint: info.endpoint }),
    (err) => ({ haproxy: null, unreachable: errorText(err) }),
  );
  loop.start();
  logger.info(
    {
      provider: provider.name,
      ...reached,
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
    reconciler: loop,
    metrics,
    provider,
    stop() {
      stopping ??= gracefulStop(
        { server, unanswered: gate.unanswered, loop, kube, provider, logger },
        config.shutdownGraceMs,
      );
      return stopping;
    },
  };
}
