import type { Server } from 'node:http';
import pino, { type Logger } from 'pino';
import { type Config, renderOptionsOf } from './config/env.js';
import { createMetrics, type Metrics } from './metrics/metrics.js';
import type { Provider } from './reconcile/provider.js';
import { Reconciler } from './reconcile/reconciler.js';
import { ClusterStore } from './store/cluster-store.js';
import { KubernetesTopology, loadKubeConfig } from './topology/kubernetes.js';
import { StaticTopology, type Topology } from './topology/topology.js';
import { createApp, limitRequestTime, type Readiness } from './webhook/app.js';
import { WebhookAuthenticator } from './webhook/auth.js';

export const VERSION = '0.1.0';

export interface Service {
  /** Base URL of the webhook API, health and metrics. */
  url: string;
  store: ClusterStore;
  reconciler: Reconciler;
  metrics: Metrics;
  /** Stops accepting calls, lets the pass in flight finish, stops the watches. */
  stop(): Promise<void>;
}

export interface ServiceDeps {
  /** Where plans are applied (HAProxy's Data Plane API in production). */
  provider: Provider;
  logger?: Logger;
}

export function createLogger(config: Pick<Config, 'logLevel'>): Logger {
  // Secrets never reach the log: credentials are only in headers and config, both redacted here.
  return pino({
    level: config.logLevel,
    base: { service: 'kubebyon-haproxy-adapter' },
    redact: [
      'req.headers.authorization',
      'req.headers["x-kubebyon-signature"]',
      'config.webhook.secret',
      'config.dataplane.password',
    ],
  });
}

/**
 * The composition root: opens the desired state, starts the topology, the reconcile loop and the HTTP API,
 * and reconciles at once (so a restart converges HAProxy to what was accepted before it).
 */
export async function startService(config: Config, deps: ServiceDeps): Promise<Service> {
  const logger = deps.logger ?? createLogger(config);
  const metrics = createMetrics();
  const store = await ClusterStore.open(config.stateFile);
  let reconciler: Reconciler | undefined;
  const request = (reason: string) => void reconciler?.request(reason);

  let topology: Topology;
  let kube: KubernetesTopology | undefined;
  if (config.topology.kind === 'kubernetes') {
    kube = new KubernetesTopology(
      loadKubeConfig(),
      { addressType: config.haproxy.nodeAddressType, excludeNotReady: config.topology.excludeNotReady },
      request,
      metrics,
      logger,
    );
    topology = kube;
  } else {
    topology = new StaticTopology(config.topology.nodeAddresses);
  }

  reconciler = new Reconciler({
    store,
    topology,
    provider: deps.provider,
    render: renderOptionsOf(config.haproxy),
    metrics,
    logger,
    debounceMs: config.reconcile.debounceMs,
    maxDelayMs: config.reconcile.maxDelayMs,
    resyncIntervalMs: config.reconcile.resyncIntervalMs,
    retries: config.reconcile.retries,
    publicPort: config.publicPort,
  });
  const loop = reconciler;

  const readiness = async (): Promise<Readiness> => {
    const checks: Readiness['checks'] = { state: { ok: true } };
    try {
      await deps.provider.ping();
      checks.haproxy = { ok: true };
    } catch (err) {
      checks.haproxy = { ok: false, detail: err instanceof Error ? err.message : String(err) };
    }
    checks.first_reconcile = loop.ready
      ? { ok: true }
      : { ok: false, detail: 'no reconcile has succeeded yet' };
    Object.assign(checks, kube?.health() ?? {});
    return { ready: Object.values(checks).every((c) => c.ok), checks };
  };

  const app = createApp({
    store,
    reconciler: loop,
    metrics,
    logger,
    auth: await WebhookAuthenticator.open({
      mode: config.webhook.auth,
      secret: config.webhook.secret,
      replayWindowSeconds: config.webhook.replayWindowSeconds,
      replayFile: `${config.stateFile}.replay`,
    }),
    waitTimeoutMs: config.webhook.waitTimeoutMs,
    bodyLimitBytes: config.webhook.bodyLimitBytes,
    readiness,
    version: VERSION,
  });

  if (kube) await kube.start();
  const server: Server = await new Promise((resolve, reject) => {
    const s = app.listen(config.listen.port, config.listen.host, () => resolve(s));
    s.once('error', reject);
  });
  limitRequestTime(server);
  const address = server.address();
  const port = address && typeof address !== 'string' ? address.port : config.listen.port;
  loop.start();
  logger.info({ port, clusters: store.list().length, topology: config.topology.kind }, 'service started');

  let stopping: Promise<void> | undefined;
  return {
    url: `http://${config.listen.host === '0.0.0.0' ? '127.0.0.1' : config.listen.host}:${port}`,
    store,
    reconciler: loop,
    metrics,
    stop() {
      stopping ??= (async () => {
        logger.info('stopping: no new calls, finishing the pass in flight');
        const closed = new Promise<void>((resolve) => server.close(() => resolve()));
        server.closeIdleConnections();
        await loop.stop();
        // Waiting calls were answered by the last pass; their keep-alive connections are idle now.
        server.closeIdleConnections();
        await kube?.stop();
        await closed;
        logger.info('stopped');
      })();
      return stopping;
    },
  };
}
