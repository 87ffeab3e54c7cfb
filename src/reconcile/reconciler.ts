import type { Logger } from 'pino';
import type { RenderOptions } from '../haproxy/render.js';
import type { Metrics } from '../metrics/metrics.js';
import { formatPlan } from '../plan/format.js';
import type { Plan } from '../plan/plan.js';
import type { OwnedProvider } from '../registry/owned-provider.js';
import type { ClusterStore } from '../store/cluster-store.js';
import type { Topology } from '../topology/topology.js';
import { desiredConfig, planAgainst, runPass } from './pass.js';
import { CLUSTER_STATES, type ClusterStatus, clusterStatuses, type PassResult } from './status.js';

export interface ReconcilerOptions {
  store: ClusterStore;
  topology: Topology;
  provider: OwnedProvider;
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
  /** First delay before a failed pass is tried again by itself (doubles up to 30 s); 0 disables it. */
  failureBackoffMs?: number;
  /**
   * After a failed pass, how often HAProxy (or its API) is pinged while it does not answer; the pass is tried
   * again as soon as it answers, instead of at the end of the backoff. Default 1000; 0 disables it.
   */
  recoveryProbeMs?: number;
}

/** `GET /v1/plan` before the topology has been read: an unread topology is unknown, not empty. */
export class TopologyNotSyncedError extends Error {
  override readonly name = 'TopologyNotSyncedError';
  constructor() {
    super('the topology has not been read yet; a plan now would remove every server');
  }
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

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const MAX_FAILURE_BACKOFF_MS = 30_000;
const RECOVERY_PING_TIMEOUT_MS = 5_000;

/**
 * Level-triggered and idempotent: events only say "look again". Each pass (`runPass`) reads the whole desired
 * state and HAProxy's current state, plans, and applies the plan as one unit. This class schedules passes:
 * one at a time, events during the debounce window or during a pass served together by the next pass, and a
 * failed pass tried again by itself with backoff.
 */
export class Reconciler {
  private requested = 0;
  private served = 0;
  private waiters: Waiter[] = [];
  private running: Promise<void> | undefined;
  private resyncTimer: NodeJS.Timeout | undefined;
  private retryTimer: NodeJS.Timeout | undefined;
  private recoveryTimer: NodeJS.Timeout | undefined;
  private failures = 0;
  private stopped = false;
  private readonly abort = new AbortController();
  private last: PassResult | undefined;
  private readonly appliedAt = new Map<string, number>();
  private reasons = new Set<string>();
  private firstPassOk = false;
  /** When the last pass ended (epoch ms): a change later than the debounce time after it is applied at once. */
  private lastActive = 0;

  constructor(private readonly o: ReconcilerOptions) {}

  /** Whether a pass has completed successfully since start. */
  get ready(): boolean {
    return this.firstPassOk;
  }

  /** The last pass's failure, or null: readiness reports it. */
  get lastError(): string | null {
    return this.last && !this.last.ok ? (this.last.error ?? 'failed') : null;
  }

  start(): void {
    this.request('start');
    if (this.o.resyncIntervalMs > 0) {
      this.resyncTimer = setInterval(() => this.request('resync'), this.o.resyncIntervalMs);
      this.resyncTimer.unref();
    }
  }

  /**
   * Stops timers and lets the pass in flight finish (an apply is never cut in half by choice). After
   * `graceMs` the pass is aborted: providers then leave HAProxy as it was.
   */
  async stop(graceMs = 20_000): Promise<void> {
    this.stopped = true;
    clearInterval(this.resyncTimer);
    clearTimeout(this.retryTimer);
    clearTimeout(this.recoveryTimer);
    if (this.running) {
      let timer: NodeJS.Timeout | undefined;
      const expired = new Promise<void>((resolve) => {
        timer = setTimeout(resolve, graceMs);
      });
      await Promise.race([this.running, expired]);
      clearTimeout(timer);
      this.abort.abort(new Error('shutting down'));
      await this.running;
    }
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
  async preview(signal: AbortSignal = this.abort.signal): Promise<{ plan: Plan; text: string }> {
    if (!this.o.topology.synced()) throw new TopologyNotSyncedError();
    const { config } = desiredConfig(this.o.store.list(), this.o.topology, this.o.render);
    const p = await planAgainst(config, this.o.provider, signal);
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
      // After a quiet spell the first change is applied at once; changes close behind it (during its pass or
      // within the debounce time after it) wait for quiet and go together into the next pass.
      if (firstSeen - this.lastActive < this.o.debounceMs) {
        let seen = this.requested;
        await sleep(this.o.debounceMs);
        while (this.requested !== seen && Date.now() - firstSeen < this.o.maxDelayMs) {
          seen = this.requested;
          await sleep(this.o.debounceMs);
        }
      }
      const generation = this.requested;
      // A pass that only a periodic resync asked for, and that finds changes, has repaired drift.
      const resyncOnly = this.reasons.size === 1 && this.reasons.has('resync');
      this.reasons.clear();
      const outcome = await this.pass(resyncOnly);
      this.lastActive = Date.now();
      this.served = generation;
      const ready = this.waiters.filter((w) => w.generation <= generation);
      this.waiters = this.waiters.filter((w) => w.generation > generation);
      for (const w of ready) w.resolve(outcome);
    }
  }

  private async pass(resyncOnly: boolean): Promise<PassOutcome> {
    const { metrics, logger } = this.o;
    if (!this.o.topology.synced()) {
      // Unknown topology is not an empty one: applying now would remove every server.
      logger.info('topology not read yet; nothing applied');
      return { ok: false, changed: false, error: 'topology_not_synced' };
    }
    const endTimer = metrics.reconcileDuration.startTimer();
    const { result, changed, touched } = await runPass({
      records: this.o.store.list(),
      topology: this.o.topology,
      provider: this.o.provider,
      render: this.o.render,
      retries: this.o.retries,
      signal: this.abort.signal,
      logger,
      metrics,
    });
    endTimer();
    const now = Date.now();
    if (result.ok) {
      this.firstPassOk = true;
      for (const route of result.desired.routes) {
        if (result.conflicted.has(route.cluster)) continue;
        if (touched.has(route.cluster) || !this.appliedAt.has(route.cluster))
          this.appliedAt.set(route.cluster, now);
      }
      metrics.reconciles.inc({ result: changed ? 'changed' : 'unchanged' });
      metrics.lastSuccess.set(now / 1000);
      if (changed && resyncOnly) metrics.driftCorrections.inc();
    } else {
      metrics.reconciles.inc({ result: 'failed' });
    }
    const routed = new Set(result.desired.routes.map((r) => r.cluster));
    for (const name of this.appliedAt.keys()) {
      if (!routed.has(name)) this.appliedAt.delete(name);
    }
    this.last = result;
    this.publishGauges();
    this.scheduleRetry(result.ok);
    return result.ok ? { ok: true, changed } : { ok: false, changed: false, error: result.error ?? 'failed' };
  }

  // A failed pass (HAProxy away, a reload that could not bind) is tried again without waiting for an event.
  private scheduleRetry(ok: boolean): void {
    clearTimeout(this.retryTimer);
    const base = this.o.failureBackoffMs ?? 1000;
    if (ok || base <= 0 || this.stopped) {
      this.failures = 0;
      return;
    }
    const delay = Math.min(MAX_FAILURE_BACKOFF_MS, base * 2 ** Math.min(this.failures, 10));
    this.failures++;
    this.retryTimer = setTimeout(() => this.request('retry'), delay);
    this.retryTimer.unref();
    this.watchRecovery();
  }

  /**
   * A pass that failed because HAProxy (or its API) did not answer is tried again the moment it answers,
   * not when a backoff grown during the outage runs out. Only a provider seen away counts: one that answers
   * all along failed for another reason (a reload HAProxy refuses), which the backoff paces.
   */
  private watchRecovery(): void {
    const every = this.o.recoveryProbeMs ?? 1000;
    clearTimeout(this.recoveryTimer);
    if (every <= 0) return;
    const failures = this.failures;
    let seenAway = false;
    const probe = async () => {
      // A pass since (the backoff's own retry, or an event) has taken over.
      if (this.stopped || this.failures !== failures) return;
      try {
        await this.o.provider.ping(
          AbortSignal.any([this.abort.signal, AbortSignal.timeout(RECOVERY_PING_TIMEOUT_MS)]),
        );
        if (!seenAway || this.stopped || this.failures !== failures) return;
        this.o.logger.info('HAProxy answers again; reconciling now');
        clearTimeout(this.retryTimer);
        void this.request('provider_back');
        return;
      } catch {
        seenAway = true;
      }
      this.recoveryTimer = setTimeout(probe, every);
      this.recoveryTimer.unref();
    };
    this.recoveryTimer = setTimeout(probe, 0);
    this.recoveryTimer.unref();
  }

  private publishGauges(): void {
    const { metrics } = this.o;
    const statuses = this.statuses();
    metrics.routes.reset();
    for (const state of CLUSTER_STATES) {
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
