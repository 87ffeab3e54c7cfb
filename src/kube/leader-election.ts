import { setTimeout as delay } from 'node:timers/promises';
import {
  type ConfigurationOptions,
  CoordinationV1Api,
  type KubeConfig,
  Observable,
  type ObservableMiddleware,
  type RequestContext,
  type ResponseContext,
  type V1Lease,
} from '@kubernetes/client-node';
import type { Logger } from 'pino';
import { describeError, statusOf } from './errors.js';
import {
  createdRecord,
  DEFAULT_TIMINGS,
  decide,
  jittered,
  type LeaseConfig,
  type LeaseRecord,
  type LeaseTimings,
  type Observation,
  observe,
  releasedRecord,
  toRecord,
  validateLeaseConfig,
  withinRenewDeadline,
  withRecord,
} from './lease-rules.js';

/**
 * Leader election on a coordination.k8s.io/v1 Lease with client-go's semantics (tools/leaderelection with a
 * LeaseLock); the rules themselves are in lease-rules.ts. Callers check `isLeader()` right before each write
 * they must not share: it is false as soon as the renew deadline passes without a successful renewal, which
 * is before any standby can have acquired the lease.
 * (Over 300 lines: one state machine, acquire, renew and release on one Lease, read best in one piece.)
 */

export type LeaderElectionConfig = Pick<LeaseConfig, 'namespace' | 'name' | 'identity'> &
  Partial<LeaseTimings>;

export interface LeaseClock {
  /** Milliseconds; only differences matter, except in the (informational) times written to the Lease. */
  now(): number;
}

/** Monotonic, so a step of the wall clock cannot stretch or cut a lease; close to epoch ms. */
export const monotonicClock: LeaseClock = { now: () => performance.timeOrigin + performance.now() };

export interface LeaderCallbacks {
  /** A term began; `signal` aborts when it ends (leadership lost, or `stop()`). Not awaited. */
  onStartedLeading(signal: AbortSignal): void | Promise<void>;
  /** A term ended (lost, or `stop()`); not called by a replica that never led. */
  onStoppedLeading(): void;
  /** The observed holder changed to `identity` (this replica included); a released lease names nobody. */
  onNewLeader?(identity: string): void;
}

export interface LeaderElectorDeps {
  kubeConfig: KubeConfig;
  callbacks: LeaderCallbacks;
  logger: Logger;
  clock?: LeaseClock;
  /** [0, 1): the retry jitter. */
  random?: () => number;
}

export class LeaderElector {
  readonly config: LeaseConfig;
  private readonly api: CoordinationV1Api;
  private readonly callbacks: LeaderCallbacks;
  private readonly logger: Logger;
  private readonly clock: LeaseClock;
  private readonly random: () => number;
  private observation: Observation | undefined;
  /** The Lease as last read or written: its resourceVersion makes each write conditional. */
  private lease: V1Lease | undefined;
  private leading = false;
  /** Local time the last successful write of ours was sent (not answered): the fencing anchor. */
  private lastRenewMs: number | undefined;
  private reported: string | undefined;
  private term: AbortController | undefined;
  /** The errors warned about since the last successful call. */
  private readonly warned = new Set<string>();
  private stopper: AbortController | undefined;
  private running: Promise<void> | undefined;

  constructor(config: LeaderElectionConfig, deps: LeaderElectorDeps) {
    this.config = validateLeaseConfig({ ...DEFAULT_TIMINGS, ...config });
    this.api = deps.kubeConfig.makeApiClient(CoordinationV1Api);
    this.callbacks = deps.callbacks;
    this.logger = deps.logger.child({
      lease: `${config.namespace}/${config.name}`,
      identity: config.identity,
    });
    this.clock = deps.clock ?? monotonicClock;
    this.random = deps.random ?? Math.random;
  }

  start(): void {
    if (this.running) return;
    this.stopper = new AbortController();
    this.running = this.run(this.stopper.signal);
  }

  /** True only while this replica holds the lease and its last renewal is younger than the renew deadline. */
  isLeader(): boolean {
    return (
      this.leading && withinRenewDeadline(this.lastRenewMs, this.clock.now(), this.config.renewDeadlineMs)
    );
  }

  /** The holder last observed; undefined before the first read and while the lease is released. */
  leader(): string | undefined {
    return this.observation?.record.holderIdentity || undefined;
  }

  /** Stops trying; a leader ends its term and releases the lease (ReleaseOnCancel) so a standby takes over. */
  async stop(): Promise<void> {
    await this.halt();
    if (this.leading) this.endTerm('stopped');
    // As client-go: whenever the lease last seen names us (a write may have won just as stop() came).
    if (this.observation?.record.holderIdentity === this.config.identity) await this.release();
  }

  /**
   * Test-only: halts every timer and request and leaves all else as it is, neither releasing nor ending the
   * term: a replica killed with SIGKILL, or frozen. Its `isLeader()` still turns false on time alone.
   */
  async abandon(): Promise<void> {
    await this.halt();
  }

  private async halt(): Promise<void> {
    this.stopper?.abort();
    await this.running;
    this.running = undefined;
  }

  private async run(stop: AbortSignal): Promise<void> {
    while (!stop.aborted) {
      await this.acquire(stop);
      if (stop.aborted) return;
      await this.lead(stop);
      // client-go's Run returns here and the process is expected to exit; we stand by again instead, so a
      // replica that lost its lease (the API server out of reach) can lead again once it is back.
    }
  }

  private async acquire(stop: AbortSignal): Promise<void> {
    while (!stop.aborted) {
      if (await this.tryAcquireOrRenew(stop, this.config.renewDeadlineMs)) return;
      await pause(jittered(this.config.retryPeriodMs, this.random), stop);
    }
  }

  private async lead(stop: AbortSignal): Promise<void> {
    this.beginTerm();
    const { retryPeriodMs, renewDeadlineMs, identity } = this.config;
    for (;;) {
      await pause(Math.min(retryPeriodMs, this.deadlineLeft()), stop);
      // stop() ends the term and releases; abandon() leaves it as it is.
      if (stop.aborted) return;
      const left = this.deadlineLeft();
      if (left > 0 && (await this.tryAcquireOrRenew(stop, left))) continue;
      if (stop.aborted) return;
      if (this.deadlineLeft() <= 0) return this.endTerm(`not renewed within ${renewDeadlineMs} ms`);
      const holder = this.observation?.record.holderIdentity;
      if (holder !== identity) return this.endTerm(`the lease names ${holder || 'nobody'}`);
    }
  }

  private deadlineLeft(): number {
    return (this.lastRenewMs ?? Number.NEGATIVE_INFINITY) + this.config.renewDeadlineMs - this.clock.now();
  }

  /** One try, every call bounded by `budgetMs` (client-go bounds a try by the renew deadline). */
  private async tryAcquireOrRenew(stop: AbortSignal, budgetMs: number): Promise<boolean> {
    const { name, namespace, identity, leaseDurationMs } = this.config;
    const signal = AbortSignal.any([stop, AbortSignal.timeout(Math.max(1, Math.ceil(budgetMs)))]);
    const options = bounded(signal);
    try {
      // The leader's fast path: write over what it wrote last; any failure falls back to reading.
      if (this.leading && this.lease && this.observation) {
        const now = this.clock.now();
        const decision = decide(this.observation, identity, leaseDurationMs, now);
        if (decision.kind === 'write') {
          const body = withRecord(this.lease, decision.record);
          const ok = await this.api.replaceNamespacedLease({ name, namespace, body }, options).then(
            (written) => this.wrote(written, now),
            () => false,
          );
          if (ok || signal.aborted) return ok;
        }
      }
      const lease = await this.api.readNamespacedLease({ name, namespace }, options).catch((err: unknown) => {
        if (statusOf(err) === 404) return undefined;
        throw err;
      });
      const now = this.clock.now();
      if (!lease) {
        const body = withRecord(
          { metadata: { name, namespace } },
          createdRecord(identity, leaseDurationMs, now),
        );
        return this.wrote(await this.api.createNamespacedLease({ namespace, body }, options), now);
      }
      this.warned.clear();
      this.see(toRecord(lease), now);
      const decision = decide(this.observation as Observation, identity, leaseDurationMs, now);
      if (decision.kind === 'held') return false;
      const body = withRecord(lease, decision.record);
      return this.wrote(await this.api.replaceNamespacedLease({ name, namespace, body }, options), now);
    } catch (err) {
      this.failed(err, stop);
      return false;
    }
  }

  private wrote(lease: V1Lease, sentAtMs: number): true {
    this.lease = lease;
    this.lastRenewMs = sentAtMs;
    this.warned.clear();
    this.see(toRecord(lease), this.clock.now());
    return true;
  }

  private see(record: LeaseRecord, nowMs: number): void {
    this.observation = observe(this.observation, record, nowMs);
    const holder = record.holderIdentity;
    if (holder === this.reported) return;
    this.reported = holder;
    if (holder === '') return;
    this.logger.info({ leader: holder }, 'leader election: new leader');
    guard(this.logger, 'onNewLeader', () => this.callbacks.onNewLeader?.(holder));
  }

  /**
   * A 409 only means another replica wrote first. Other errors warn once per kind within a streak of
   * failures (an outage: refused, timed out, then forbidden while RBAC warms up), not once per try.
   */
  private failed(err: unknown, stop: AbortSignal): void {
    if (stop.aborted) return;
    const message = describeError(err);
    if (statusOf(err) === 409 || this.warned.has(message)) {
      this.logger.debug({ err: message }, 'leader election: try failed');
      return;
    }
    this.warned.add(message);
    this.logger.warn({ err: message }, 'leader election: Kubernetes call failed; retrying');
  }

  private beginTerm(): void {
    this.leading = true;
    this.term = new AbortController();
    this.logger.info('leader election: acquired the lease; leading');
    const signal = this.term.signal;
    guard(this.logger, 'onStartedLeading', () => this.callbacks.onStartedLeading(signal));
  }

  private endTerm(reason: string): void {
    this.leading = false;
    this.term?.abort(new Error(`leadership ended: ${reason}`));
    this.logger.info({ reason }, 'leader election: stopped leading');
    guard(this.logger, 'onStoppedLeading', () => this.callbacks.onStoppedLeading());
  }

  /** ReleaseOnCancel: conditional on our last write, so a lease someone else took meanwhile is left alone. */
  private async release(): Promise<void> {
    if (!this.lease || !this.observation) return;
    const { name, namespace, renewDeadlineMs } = this.config;
    const now = this.clock.now();
    const body = withRecord(this.lease, releasedRecord(this.observation.record, now));
    try {
      const released = await this.api.replaceNamespacedLease(
        { name, namespace, body },
        bounded(AbortSignal.timeout(renewDeadlineMs)),
      );
      this.lease = released;
      this.see(toRecord(released), this.clock.now());
      this.logger.info('leader election: released the lease');
    } catch (err) {
      this.logger.warn(
        { err: describeError(err) },
        'leader election: could not release the lease; it will expire',
      );
    }
  }
}

/** Per-call options that give the request `signal` (the generated client has no timeout of its own). */
function bounded(signal: AbortSignal): ConfigurationOptions {
  const middleware: ObservableMiddleware = {
    pre(context: RequestContext) {
      context.setSignal(signal);
      return new Observable(Promise.resolve(context));
    },
    post: (context: ResponseContext) => new Observable(Promise.resolve(context)),
  };
  return { middleware: [middleware], middlewareMergeStrategy: 'append' };
}

/** Resolves after `ms`, or at once when `signal` aborts; never keeps the process alive. */
async function pause(ms: number, signal: AbortSignal): Promise<void> {
  await delay(Math.max(0, ms), undefined, { signal, ref: false }).catch(() => {});
}

function guard(logger: Logger, what: string, fn: () => unknown): void {
  const warn = (err: unknown) =>
    logger.warn({ err: err instanceof Error ? err.message : String(err) }, `leader election: ${what} threw`);
  try {
    Promise.resolve(fn()).catch(warn);
  } catch (err) {
    warn(err);
  }
}
