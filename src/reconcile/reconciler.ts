import pRetry from 'p-retry';
import type { Logger } from 'pino';
import { type RenderOptions, renderDesired } from '../haproxy/render.js';
import type { Metrics } from '../metrics/metrics.js';
import { formatPlan } from '../plan/format.js';
import { type Plan, plan } from '../plan/plan.js';
import type { ClusterStore } from '../store/cluster-store.js';
import type { Topology } from '../topology/topology.js';
import { desiredRoutes } from './desired.js';
import { ConcurrentChangeError, type Provider, ReloadFailedError } from './provider.js';
import { type ClusterStatus, clusterStatuses, type PassResult } from './status.js';

export interface ReconcilerOptions {
  store: ClusterStore;
  topology: Topology;
  provider: Provider;
  render: RenderOptions;
  metrics: Metrics;
  logger: Logger;
  /** Quiet time after the last event before a pass starts: a burst of events becomes one pass. */
  debounceMs: number;
  /** Longest a steady stream of events can hold a pass back. */
  maxDelayMs: number;
  /** Periodic resync that repairs drift; 0 disables it. */
  resyncIntervalMs: number;
  /** Attempts after the first for one pass (re-read and re-plan on concurrent changes, back off on errors). */
  retries: number;
  /** Port users reach HAProxy on, for `api_endpoint`. */
  publicPort: number;
}

export interface PassOutcome {
  ok: boolean;
  changed: boolean;
  error?: string;
}

interface Waiter {
  generation: number;
  resolve: (outcome: PassOutcome) => void;
}

const PLAN_LOG_LINES = 50;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * Level-triggered and idempotent: events only say "look again". Each pass reads the whole desired state and
 * HAProxy's current state, plans, and applies the plan as one unit. One pass runs at a time; events that
 * arrive during the debounce window or during a pass are served together by the next pass.
 */
export class Reconciler {
  private requested = 0;
  private served = 0;
  private waiters: Waiter[] = [];
  private running: Promise<void> | undefined;
  private resyncTimer: NodeJS.Timeout | undefined;
  private stopped = false;
  private last: PassResult | undefined;
  private readonly appliedAt = new Map<string, number>();
  private reasons = new Set<string>();
  private firstPassOk = false;

  constructor(private readonly o: ReconcilerOptions) {}

  /** Whether a pass has completed successfully since start. */
  get ready(): boolean {
    return this.firstPassOk;
  }

  start(): void {
    this.request('start');
    if (this.o.resyncIntervalMs > 0) {
      this.resyncTimer = setInterval(() => this.request('resync'), this.o.resyncIntervalMs);
      this.resyncTimer.unref();
    }
  }

  /** Stops timers and waits for the pass in flight (an apply is never cut in half). */
  async stop(): Promise<void> {
    this.stopped = true;
    clearInterval(this.resyncTimer);
    await this.running;
    for (const w of this.waiters.splice(0)) w.resolve({ ok: false, changed: false, error: 'shutting down' });
  }

  /** Marks the desired state dirty; the promise resolves after a pass that began after this call. */
  request(reason: string): Promise<PassOutcome> {
    if (this.stopped) return Promise.resolve({ ok: false, changed: false, error: 'shutting down' });
    const generation = ++this.requested;
    this.reasons.add(reason);
    const done = new Promise<PassOutcome>((resolve) => this.waiters.push({ generation, resolve }));
    this.o.logger.debug({ reason, generation }, 'reconcile requested');
    this.kick();
    return done;
  }

  statuses(): ClusterStatus[] {
    return clusterStatuses(this.o.store.list(), this.last, this.appliedAt, this.o.publicPort);
  }

  /** What the next pass would apply, without applying it. */
  async preview(): Promise<{ plan: Plan; text: string }> {
    const desired = desiredRoutes(this.o.store.list(), this.o.topology);
    const p = plan(renderDesired(desired.routes, this.o.render), await this.o.provider.readState());
    return { plan: p, text: formatPlan(p) };
  }

  private kick(): void {
    if (this.running || this.stopped) return;
    this.running = this.drain().finally(() => {
      this.running = undefined;
      if (this.requested > this.served) this.kick();
    });
  }

  private async drain(): Promise<void> {
    while (this.requested > this.served && !this.stopped) {
      const firstSeen = Date.now();
      let seen = this.requested;
      await sleep(this.o.debounceMs);
      while (this.requested !== seen && Date.now() - firstSeen < this.o.maxDelayMs) {
        seen = this.requested;
        await sleep(this.o.debounceMs);
      }
      const generation = this.requested;
      // A pass that only a periodic resync asked for, and that finds changes, has repaired drift.
      const resyncOnly = this.reasons.size === 1 && this.reasons.has('resync');
      this.reasons.clear();
      const outcome = await this.pass(resyncOnly);
      this.served = generation;
      const ready = this.waiters.filter((w) => w.generation <= generation);
      this.waiters = this.waiters.filter((w) => w.generation > generation);
      for (const w of ready) w.resolve(outcome);
    }
  }

  private async pass(resyncOnly: boolean): Promise<PassOutcome> {
    const { metrics, logger } = this.o;
    const startedAt = Date.now();
    if (!this.o.topology.synced()) {
      // Unknown topology is not an empty one: applying now would remove every server.
      logger.info('topology not read yet; nothing applied');
      return { ok: false, changed: false, error: 'topology_not_synced' };
    }
    const endTimer = metrics.reconcileDuration.startTimer();
    const records = this.o.store.list();
    const desired = desiredRoutes(records, this.o.topology);
    const config = renderDesired(desired.routes, this.o.render);
    const conflicted = new Map<string, string>();
    const touched = new Set<string>();
    let changed = false;
    let result: PassResult;
    try {
      await pRetry(
        async () => {
          const p = plan(config, await this.o.provider.readState());
          conflicted.clear();
          for (const c of p.conflicts) {
            const backend = config.backends.find((b) => b.name === c.name);
            if (backend) conflicted.set(backend.cluster, c.detail);
            else logger.warn({ conflict: c.kind, object: c.name }, c.detail);
          }
          if (p.operations.length === 0) return;
          for (const cluster of clustersTouched(p, config.backends)) touched.add(cluster);
          // A cold sync of thousands of routes is tens of thousands of lines: log the head only.
          const lines = formatPlan(p).split('\n');
          logger.info(
            {
              operations: p.operations.length,
              plan: lines.slice(0, PLAN_LOG_LINES).join('\n'),
              truncated: lines.length > PLAN_LOG_LINES,
            },
            'applying plan',
          );
          try {
            const report = await this.o.provider.apply(p);
            metrics.transactions.inc({ result: 'committed' });
            if (report.reload === 'succeeded') metrics.reloads.inc({ result: 'succeeded' });
          } catch (err) {
            metrics.transactions.inc({
              result: err instanceof ConcurrentChangeError ? 'conflict' : 'failed',
            });
            if (err instanceof ReloadFailedError) metrics.reloads.inc({ result: 'failed' });
            throw err;
          }
          changed = true;
          if (resyncOnly) metrics.driftCorrections.inc();
        },
        {
          retries: this.o.retries,
          minTimeout: 100,
          maxTimeout: 5_000,
          onFailedAttempt: ({ error, attemptNumber, retriesLeft }) =>
            logger.warn({ err: error, attemptNumber, retriesLeft }, 'reconcile attempt failed'),
        },
      );
      result = { startedAt, ok: true, desired, conflicted };
      this.firstPassOk = true;
      const now = Date.now();
      for (const route of desired.routes) {
        if (conflicted.has(route.cluster)) continue;
        if (touched.has(route.cluster) || !this.appliedAt.has(route.cluster))
          this.appliedAt.set(route.cluster, now);
      }
      metrics.reconciles.inc({ result: changed ? 'changed' : 'unchanged' });
      metrics.lastSuccess.set(now / 1000);
    } catch (err) {
      const error = err instanceof Error ? err.message : String(err);
      logger.error({ err }, 'reconcile failed');
      result = { startedAt, ok: false, error, desired, conflicted };
      metrics.reconciles.inc({ result: 'failed' });
    }
    endTimer();
    const routed = new Set(desired.routes.map((r) => r.cluster));
    for (const name of this.appliedAt.keys()) {
      if (!routed.has(name)) this.appliedAt.delete(name);
    }
    this.last = result;
    this.publishGauges();
    return result.ok ? { ok: true, changed } : { ok: false, changed: false, error: result.error ?? 'failed' };
  }

  private publishGauges(): void {
    const { metrics } = this.o;
    const statuses = this.statuses();
    metrics.routes.reset();
    for (const state of ['pending', 'applied', 'rejected', 'degraded', 'error'] as const) {
      metrics.routes.set({ state }, statuses.filter((s) => s.state === state).length);
    }
    metrics.rejectedRoutes.reset();
    const reasons = new Map<string, number>();
    for (const r of this.last?.desired.rejected ?? [])
      reasons.set(r.reason, (reasons.get(r.reason) ?? 0) + 1);
    const conflicts = this.last?.conflicted.size ?? 0;
    if (conflicts > 0) reasons.set('backend_not_owned', conflicts);
    for (const [reason, count] of reasons) metrics.rejectedRoutes.set({ reason }, count);
  }
}

/** Clusters whose backend, servers or switching rule an applied plan changed. */
function clustersTouched(p: Plan, backends: ReadonlyArray<{ name: string; cluster: string }>): Set<string> {
  const clusterOf = new Map(backends.map((b) => [b.name, b.cluster]));
  const names = new Set<string>();
  for (const op of p.operations) {
    if (op.kind === 'create_backend' || op.kind === 'update_backend') names.add(op.backend.name);
    if (op.kind === 'create_server' || op.kind === 'update_server' || op.kind === 'delete_server')
      names.add(op.backend);
    if (op.kind === 'set_switching_rules') for (const r of [...op.added, ...op.removed]) names.add(r.backend);
  }
  const clusters = new Set<string>();
  for (const name of names) {
    const cluster = clusterOf.get(name);
    if (cluster !== undefined) clusters.add(cluster);
  }
  return clusters;
}
