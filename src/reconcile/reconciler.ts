import { refusalsBackendFor } from '../naming/names.js';
import { formatPlan } from '../plan/format.js';
import type { Plan } from '../plan/plan.js';
import { RoutingIndexCache } from '../plan/routing-index.js';
import { type Clock, systemClock } from '../timing/clock.js';
import { Debounce } from '../timing/debounce.js';
import { PassLedger } from './ledger.js';
import { desiredConfig, type PassReport, planAgainst, runPass } from './pass.js';
import {
  type Loop,
  type PassOutcome,
  type ReconcilerOptions,
  TopologyNotSyncedError,
} from './reconciler-options.js';
import { Requeue } from './requeue.js';
import { type PassKind, passKind, type RouteBackend, routeBackends } from './routing.js';
import { runScopedPass, type ScopedPassReport } from './scoped-pass.js';
import type { ClusterStatus } from './status.js';
import { RevisionWatch } from './watch.js';

export { type Loop, type PassOutcome, type ReconcilerOptions, TopologyNotSyncedError };

/** A pass's outcome, and whether it left the slot pool's growth to a pass no webhook waits on. */
interface Served {
  outcome: PassOutcome;
  growthDeferred: boolean;
}

interface Waiter {
  generation: number;
  resolve: (outcome: PassOutcome) => void;
}

/**
 * Level-triggered and idempotent: events only say "look again". Each pass (`runPass`) reads the whole desired
 * state and HAProxy's current state, plans, and applies the plan as one unit; with map routing, a pass only
 * webhooks asked for plans just the clusters they named (`runScopedPass`), or falls back to a full one when
 * in doubt. This class schedules passes:
 * one at a time, events during the debounce window or during a pass served together by the next pass; whether
 * and when a failed pass is tried again is `Requeue`'s one rule.
 */
export class Reconciler implements Loop {
  private requested = 0;
  private served = 0;
  private waiters: Waiter[] = [];
  private stopResync: (() => void) | undefined;
  private stopped = false;
  private readonly abort = new AbortController();
  private readonly ledger: PassLedger;
  private reasons = new Set<string>();
  /** The clusters the webhooks since the last pass changed, or `all` when anything else asked for a pass. */
  private scope: Set<string> | 'all' = new Set();
  /** Map routing's index of what HAProxy has, kept from pass to pass (`routing-index.ts`). */
  private readonly indexes = new RoutingIndexCache();
  private firstPassOk = false;
  /**
   * When passes run: the first change after a quiet spell at once, changes close behind a pass (during it, or
   * within the debounce time after it) together, after the debounce, never later than the maximum delay.
   */
  private readonly batch: Debounce;
  private readonly clock: Clock;
  private readonly requeue: Requeue;
  private readonly watch: RevisionWatch;

  constructor(private readonly o: ReconcilerOptions) {
    this.clock = o.clock ?? systemClock;
    this.ledger = new PassLedger({ ...o, clock: this.clock });
    this.requeue = new Requeue({
      clock: this.clock,
      baseMs: o.failureBackoffMs ?? 1000,
      probeMs: o.recoveryProbeMs ?? 1000,
      ping: (signal) => o.provider.ping(signal),
      signal: this.abort.signal,
      request: (reason) => void this.request(reason),
      logger: o.logger,
    });
    this.batch = new Debounce(
      this.clock,
      { debounceMs: o.debounceMs, maxDelayMs: o.maxDelayMs, leading: true },
      () => this.drain(),
    );
    this.watch = new RevisionWatch({
      clock: this.clock,
      intervalMs: o.watchMs ?? 0,
      revision: (signal) => o.provider.revision(signal),
      signal: this.abort.signal,
      changed: () => void this.request('haproxy_reloaded'),
      ours: (token) => o.provider.isOwnRevision(token),
      logger: o.logger,
    });
  }

  /** Whether a pass has completed successfully since start. */
  get ready(): boolean {
    return this.firstPassOk;
  }

  /** The last pass's failure, or null: readiness reports it. */
  get lastError(): string | null {
    const last = this.ledger.last;
    return last && !last.ok ? (last.error ?? 'failed') : null;
  }

  start(): void {
    this.request('start');
    const every = this.o.resyncIntervalMs;
    const resync = () => {
      this.stopResync = this.clock.after(every, () => {
        void this.request('resync');
        resync();
      });
    };
    if (every > 0) resync();
    this.watch.start();
  }

  /**
   * Stops timers and lets the pass in flight finish (an apply is never cut in half by choice). After
   * `graceMs` the pass is aborted: providers then leave HAProxy as it was.
   */
  async stop(graceMs = 20_000): Promise<void> {
    this.stopped = true;
    this.stopResync?.();
    this.watch.stop();
    this.requeue.cancel();
    const closed = this.batch.close();
    let cancel = () => {};
    const expired = new Promise<void>((resolve) => {
      cancel = this.clock.after(graceMs, resolve);
    });
    await Promise.race([closed, expired]);
    cancel();
    this.abort.abort(new Error('shutting down'));
    await closed;
    for (const w of this.waiters.splice(0)) w.resolve({ ok: false, changed: false, error: 'shutting down' });
  }

  /**
   * Marks the desired state dirty; the promise resolves after a pass that began after this call. A webhook
   * names the clusters it changed: a pass only webhooks asked for may then plan only those (map routing).
   */
  request(reason: string, changed?: { clusters: readonly string[] }): Promise<PassOutcome> {
    if (this.stopped) return Promise.resolve({ ok: false, changed: false, error: 'shutting down' });
    const generation = ++this.requested;
    this.reasons.add(reason);
    if (reason !== 'webhook' || !changed || this.scope === 'all') this.scope = 'all';
    else for (const name of changed.clusters) this.scope.add(name);
    const done = new Promise<PassOutcome>((resolve) => this.waiters.push({ generation, resolve }));
    this.o.logger.debug({ reason, generation }, 'reconcile requested');
    this.batch.schedule();
    return done;
  }

  statuses(): ClusterStatus[] {
    return this.ledger.statuses();
  }

  /** One cluster's status, or undefined when the store has no such cluster. */
  status(name: string): ClusterStatus | undefined {
    return this.ledger.status(name);
  }

  /**
   * Connections each cluster's authorized networks refused since HAProxy last loaded its configuration: the
   * refusals table read from HAProxy, joined with the backend each cluster holds.
   */
  async refusals(signal: AbortSignal): Promise<Array<{ cluster: string; host: string; count: number }>> {
    const counts = await this.o.provider.refusals(refusalsBackendFor(this.o.render.namePrefix), signal);
    return this.ledger.countsByCluster(counts);
  }

  /** What the next pass would apply, without applying it, and which backend would serve each cluster after. */
  async preview(
    signal: AbortSignal = this.abort.signal,
  ): Promise<{ plan: Plan; text: string; routes: Map<string, RouteBackend> }> {
    if (!this.o.topology.synced()) throw new TopologyNotSyncedError();
    const { config } = desiredConfig(this.o.store.list(), this.o.topology, this.o.render);
    const p = await planAgainst(config, this.o.provider, signal);
    return { plan: p, text: formatPlan(p), routes: routeBackends(config, p) };
  }

  /** One pass for every request so far (none when a pass already served them). */
  private async drain(): Promise<void> {
    if (this.requested <= this.served || this.stopped) return;
    const generation = this.requested;
    const reasons = new Set(this.reasons);
    this.reasons.clear();
    const scope = this.scope;
    this.scope = new Set();
    const { outcome, growthDeferred } = await this.pass(reasons, scope);
    this.served = generation;
    const ready = this.waiters.filter((w) => w.generation <= generation);
    this.waiters = this.waiters.filter((w) => w.generation > generation);
    for (const w of ready) w.resolve(outcome);
    // The pool is nearly held: it grows in a pass of its own, after this one's callers have their answer.
    if (growthDeferred && !this.stopped) void this.request('pool_growth');
  }

  private async pass(reasons: ReadonlySet<string>, scope: Set<string> | 'all'): Promise<Served> {
    const { metrics, logger } = this.o;
    if (!this.o.topology.synced()) {
      // Unknown topology is not an empty one: applying now would remove every server.
      logger.info('topology not read yet; nothing applied');
      return { outcome: { ok: false, changed: false, error: 'topology_not_synced' }, growthDeferred: false };
    }
    const kind = passKind(reasons);
    // This pass is the try a failure planned, or makes it moot: its own outcome plans the next.
    this.requeue.cancel();
    const endTimer = metrics.reconcileDuration.startTimer();
    const report = (await this.scopedPass(reasons, scope, kind)) ?? (await this.fullPass(kind));
    endTimer();
    const { result, changed, failure, pool } = report;
    if (result.ok) {
      this.firstPassOk = true;
      metrics.reconciles.inc({ result: changed ? 'changed' : 'unchanged' });
      metrics.lastSuccess.set(this.clock.now() / 1000);
      // A pass only a resync or a foreign reload asked for, and that finds changes, has repaired drift.
      if (changed && kind.repair) metrics.driftCorrections.inc();
    } else metrics.reconciles.inc({ result: 'failed' });
    if (!this.stopped) this.requeue.after(failure);
    if (!result.ok)
      return {
        outcome: { ok: false, changed: false, error: result.error ?? 'failed' },
        growthDeferred: false,
      };
    return { outcome: { ok: true, changed }, growthDeferred: pool?.growthDeferred ?? false };
  }

  /** Every cluster planned against everything HAProxy has: the level-triggered ground truth. */
  private async fullPass(kind: PassKind): Promise<PassReport> {
    this.o.metrics.reconcilePasses.inc({ scope: 'full' });
    const report = await runPass({
      records: this.o.store.list(),
      topology: this.o.topology,
      provider: this.o.provider,
      render: this.o.render,
      retries: this.o.retries,
      signal: this.abort.signal,
      logger: this.o.logger,
      metrics: this.o.metrics,
      kind,
      indexes: this.indexes,
    });
    this.ledger.full(report);
    this.o.passed?.('all');
    return report;
  }

  /**
   * Only the clusters webhooks changed (map routing, a cached read, after a successful pass), or undefined
   * when a full pass must run: anything else asked for this pass, or the scoped pass found a doubt.
   */
  private async scopedPass(
    reasons: ReadonlySet<string>,
    scope: Set<string> | 'all',
    kind: PassKind,
  ): Promise<ScopedPassReport | undefined> {
    const last = this.ledger.last;
    const webhooksOnly = [...reasons].every((r) => r === 'webhook');
    if (scope === 'all' || scope.size === 0 || !webhooksOnly || kind.fresh) return undefined;
    if (!last?.ok) return undefined;
    const report = await runScopedPass({
      clusters: scope,
      record: (name) => this.o.store.get(name),
      last,
      topology: this.o.topology,
      provider: this.o.provider,
      render: this.o.render,
      signal: this.abort.signal,
      logger: this.o.logger,
      metrics: this.o.metrics,
      kind,
      indexes: this.indexes,
    });
    if ('doubt' in report) {
      this.o.logger.debug({ doubt: report.doubt }, 'planning every cluster: a scoped pass could differ');
      return undefined;
    }
    this.o.metrics.reconcilePasses.inc({ scope: 'scoped' });
    this.o.logger.debug({ clusters: report.clusters.size }, 'scoped pass');
    this.ledger.scoped(report, report.clusters);
    this.o.passed?.(report.clusters);
    return report;
  }
}
