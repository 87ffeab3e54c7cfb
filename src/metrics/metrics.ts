import { Counter, collectDefaultMetrics, Gauge, Histogram } from 'prom-client';
import { CachedLinesGauge, cachingRegistry } from './cached-lines.js';

const NS = 'kubebyon_haproxy_adapter';

/**
 * Every metric the service exports. Labels only carry values from small fixed sets (results, states, reasons,
 * route templates); the one exception, `route_backend_info`, has one series per cluster the service holds.
 * With several HAProxy instances the metrics of passes and HAProxy carry `haproxy=<instance>` (a name from
 * the configured list, or a selected pod's: bounded by the instances); with one they carry none, as before.
 * `perInstance` leaves their zero series to each instance's view (`instance-metrics.ts`).
 */
export function createMetrics(options: { perInstance?: boolean } = {}) {
  const registry = cachingRegistry();
  collectDefaultMetrics({ register: registry });
  const metrics = {
    registry,
    /**
     * Brings the gauges a pass leaves up to date just before a scrape: passes publish them at most once a
     * second (computing every cluster's status on every pass would cost O(N) per webhook).
     */
    beforeScrape: {
      hook: undefined as (() => void) | undefined,
      /** The same, of each HAProxy instance's loop (several instances). */
      instances: new Map<string, () => void>(),
      /** Reads what HAProxy counted (the refusals of authorized networks) into their gauge. */
      refusals: undefined as (() => Promise<void>) | undefined,
    },
    reconciles: new Counter({
      name: `${NS}_reconciles_total`,
      help: 'Reconcile passes by result: changed (a plan was applied), unchanged (nothing to do), failed.',
      labelNames: ['result', 'haproxy'] as const,
      registers: [registry],
    }),
    reconcilePasses: new Counter({
      name: `${NS}_reconcile_passes_total`,
      help: 'Reconcile passes by scope: full (every cluster planned against everything HAProxy has) or scoped (a pass for webhook changes of a few clusters that planned only their hosts).',
      labelNames: ['scope', 'haproxy'] as const,
      registers: [registry],
    }),
    reconcileDuration: new Histogram({
      name: `${NS}_reconcile_duration_seconds`,
      help: 'Duration of reconcile passes, reading HAProxy and applying included.',
      buckets: [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
      labelNames: ['haproxy'] as const,
      registers: [registry],
    }),
    reconcilePhaseDuration: new Histogram({
      name: `${NS}_reconcile_phase_duration_seconds`,
      help: 'Time spent in each phase of a reconcile pass: render (desired objects), read (HAProxy state), plan, apply (writes, reload and its confirmation).',
      labelNames: ['phase', 'haproxy'] as const,
      buckets: [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
      registers: [registry],
    }),
    transactions: new Counter({
      name: `${NS}_transactions_total`,
      help: 'Plans applied to HAProxy (one apply each; named when every apply was a transaction), by result: committed, conflict (retried), failed.',
      labelNames: ['result', 'haproxy'] as const,
      registers: [registry],
    }),
    reloads: new Counter({
      name: `${NS}_reloads_total`,
      help: 'HAProxy reloads caused by applied plans, by outcome (succeeded, failed) and reason: pool_growth (slot backends created ahead of need), structure (any other change of frontends, backends or rules), repair (a pass asked for only by a resync or by a reload by someone else).',
      labelNames: ['result', 'reason', 'haproxy'] as const,
      registers: [registry],
    }),
    providerRequests: new Counter({
      name: `${NS}_provider_requests_total`,
      help: 'Requests sent to HAProxy by the provider, reads included: Data Plane API requests, or master-CLI commands.',
      labelNames: ['provider', 'haproxy'] as const,
      registers: [registry],
    }),
    providerBytes: new Counter({
      name: `${NS}_provider_bytes_total`,
      help: 'Bytes the provider sent to HAProxy (request bodies, CLI commands, the owned file when written) and received.',
      labelNames: ['provider', 'direction', 'haproxy'] as const,
      registers: [registry],
    }),
    routes: new Gauge({
      name: `${NS}_routes`,
      help: 'Clusters known to the service, by state.',
      labelNames: ['state', 'haproxy'] as const,
      registers: [registry],
    }),
    rejectedRoutes: new Gauge({
      name: `${NS}_rejected_routes`,
      help: 'Clusters whose route is rejected, by reason.',
      labelNames: ['reason', 'haproxy'] as const,
      registers: [registry],
    }),
    driftCorrections: new Counter({
      name: `${NS}_drift_corrections_total`,
      help: 'Passes asked for only by a periodic resync or a reload by someone else that found HAProxy changed behind the service and repaired it.',
      labelNames: ['haproxy'] as const,
      registers: [registry],
    }),
    // One series per routed cluster: bounded by the clusters the service holds, and reset every pass so a
    // deleted cluster's series goes with it. Slot backends name no cluster: this says which serves which.
    routeBackendInfo: new CachedLinesGauge({
      name: `${NS}_route_backend_info`,
      help: 'Which HAProxy backend serves each routed cluster (value 1): cluster, host (the SNI) and backend.',
      labelNames: ['cluster', 'host', 'backend', 'haproxy'] as const,
      registers: [registry],
    }),
    // One series per cluster that had a connection refused: bounded like route_backend_info.
    refusedConnections: new Gauge({
      name: `${NS}_refused_connections`,
      help: "Connections a cluster's authorized networks refused (right after their ClientHello), since HAProxy last loaded its configuration: read from HAProxy at each scrape (the refusals table).",
      labelNames: ['cluster', 'host', 'haproxy'] as const,
      registers: [registry],
    }),
    slotPoolSize: new Gauge({
      name: `${NS}_slot_pool_size`,
      help: 'Slot backends in the pool (map routing; 0 with rules routing).',
      labelNames: ['haproxy'] as const,
      registers: [registry],
    }),
    slotPoolFree: new Gauge({
      name: `${NS}_slot_pool_free`,
      help: 'Slot backends no route holds (map routing): new clusters take one without a reload.',
      labelNames: ['haproxy'] as const,
      registers: [registry],
    }),
    lastSuccess: new Gauge({
      name: `${NS}_last_successful_reconcile_timestamp_seconds`,
      help: 'Unix time of the last reconcile pass that succeeded.',
      labelNames: ['haproxy'] as const,
      registers: [registry],
    }),
    leader: new Gauge({
      name: `${NS}_leader`,
      help: 'Whether this replica leads (1) and so applies to HAProxy, or stands by (0). Always 1 without leader election.',
      registers: [registry],
    }),
    leaderTransitions: new Counter({
      name: `${NS}_leader_transitions_total`,
      help: 'Times this replica started (started) or stopped (stopped) leading.',
      labelNames: ['change'] as const,
      registers: [registry],
    }),
    haproxyInstances: new Gauge({
      name: `${NS}_haproxy_instances`,
      help: 'HAProxy instances the service drives (given as a list, or discovered from Kubernetes pods).',
      registers: [registry],
    }),
    kubernetesWatchUp: new Gauge({
      name: `${NS}_kubernetes_watch_up`,
      help: 'Whether the watch on a Kubernetes resource (nodes, services, haproxy_pods) is connected: 1 up, 0 down.',
      labelNames: ['resource'] as const,
      registers: [registry],
    }),
    kubernetesWatchErrors: new Counter({
      name: `${NS}_kubernetes_watch_errors_total`,
      help: 'Errors of the list or watch on a Kubernetes resource; each is followed by a restart with backoff.',
      labelNames: ['resource'] as const,
      registers: [registry],
    }),
    webhookRequests: new Counter({
      name: `${NS}_webhook_requests_total`,
      help: 'Webhook API requests by method (GET, HEAD, PUT, POST, DELETE or other), route template and status code.',
      labelNames: ['method', 'route', 'status'] as const,
      registers: [registry],
    }),
    webhookAuthFailures: new Counter({
      name: `${NS}_webhook_auth_failures_total`,
      help: 'Webhook calls refused with 401, by reason: missing_credentials, bad_credentials, stale_timestamp, replayed.',
      labelNames: ['reason'] as const,
      registers: [registry],
    }),
  };
  for (const reason of AUTH_FAILURE_REASONS) metrics.webhookAuthFailures.inc({ reason }, 0);
  for (const change of ['started', 'stopped']) metrics.leaderTransitions.inc({ change }, 0);
  if (!options.perInstance) initInstanceSeries(metrics, {});
  return metrics;
}

/**
 * Every series of a fixed label set exists from the start at 0: a counter that first appears at 1 shows
 * no increase() to Prometheus, so the first failed reload would raise no alert. With several HAProxy
 * instances each instance's view does this with its own `haproxy` label.
 */
export function initInstanceSeries(
  metrics: Pick<Metrics, 'reconciles' | 'transactions' | 'reconcilePasses' | 'reloads'>,
  labels: { haproxy?: string },
): void {
  for (const result of ['changed', 'unchanged', 'failed']) metrics.reconciles.inc({ result, ...labels }, 0);
  for (const result of ['committed', 'conflict', 'failed'])
    metrics.transactions.inc({ result, ...labels }, 0);
  for (const scope of ['full', 'scoped']) metrics.reconcilePasses.inc({ scope, ...labels }, 0);
  for (const result of ['succeeded', 'failed'])
    for (const reason of RELOAD_REASONS) metrics.reloads.inc({ result, reason, ...labels }, 0);
}

/** Brings every loop's gauges up to date (see `beforeScrape`), and reads HAProxy's refusal counts. */
export async function runBeforeScrape(metrics: Metrics): Promise<void> {
  metrics.beforeScrape.hook?.();
  for (const hook of metrics.beforeScrape.instances.values()) hook();
  // A scrape never fails for HAProxy: the gauge keeps what it last read.
  await metrics.beforeScrape.refusals?.().catch(() => {});
}

/** Why a plan reloaded HAProxy; the values of `reloads_total`'s `reason`. */
export const RELOAD_REASONS = ['pool_growth', 'structure', 'repair'] as const;
export type ReloadReason = (typeof RELOAD_REASONS)[number];

/** The methods the webhook API serves; any other counts as `other`, so that callers cannot add series. */
const SERVED_METHODS = new Set(['GET', 'HEAD', 'PUT', 'POST', 'DELETE']);

/** The `method` label of `webhook_requests_total` for a request's method. */
export function methodLabel(method: string): string {
  return SERVED_METHODS.has(method) ? method : 'other';
}

/** Why a webhook call got 401; the values of `webhook_auth_failures_total`'s `reason`. */
export const AUTH_FAILURE_REASONS = [
  'missing_credentials',
  'bad_credentials',
  'stale_timestamp',
  'replayed',
] as const;

export type Metrics = ReturnType<typeof createMetrics>;
