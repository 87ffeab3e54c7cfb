import { type V1Lease, V1MicroTime } from '@kubernetes/client-node';

/**
 * The pure rules of client-go's leader election (k8s.io/client-go/tools/leaderelection with a LeaseLock):
 * timings and their validation, the jittered retry, when a lease counts as expired, what to write when
 * acquiring, renewing or releasing, and the fencing test. No I/O: times are milliseconds from a local clock.
 */

/** client-go's `JitterFactor`: the acquire loop waits between retryPeriod and retryPeriod * (1 + 1.2). */
export const JITTER_FACTOR = 1.2;

export interface LeaseTimings {
  /** How long a standby waits, from its own sight of the holder's last change, before taking over. */
  leaseDurationMs: number;
  /** How long the holder keeps leading without a successful renewal (fencing: `isLeader()`). */
  renewDeadlineMs: number;
  /** The pause between tries. */
  retryPeriodMs: number;
}

/** client-go's defaults (15 s / 10 s / 2 s). */
export const DEFAULT_TIMINGS: LeaseTimings = {
  leaseDurationMs: 15_000,
  renewDeadlineMs: 10_000,
  retryPeriodMs: 2_000,
};

export interface LeaseConfig extends LeaseTimings {
  namespace: string;
  name: string;
  /** Unique per replica (a pod name): two replicas with one identity would both lead. */
  identity: string;
}

export class LeaderElectionConfigError extends Error {
  override name = 'LeaderElectionConfigError';
}

/** client-go's NewLeaderElector checks, with the same order and meaning; returns the config unchanged. */
export function validateLeaseConfig(config: LeaseConfig): LeaseConfig {
  const fail = (message: string): never => {
    throw new LeaderElectionConfigError(`leader election: ${message}`);
  };
  for (const key of ['namespace', 'name', 'identity'] as const) {
    if (typeof config[key] !== 'string' || config[key] === '') fail(`${key} must not be empty`);
  }
  for (const key of ['leaseDurationMs', 'renewDeadlineMs', 'retryPeriodMs'] as const) {
    const value = config[key];
    if (!Number.isFinite(value) || value < 1) fail(`${key} must be a positive number of ms (got ${value})`);
  }
  const { leaseDurationMs: lease, renewDeadlineMs: renew, retryPeriodMs: retry } = config;
  if (lease <= renew) fail(`leaseDurationMs (${lease}) must be greater than renewDeadlineMs (${renew})`);
  if (renew <= JITTER_FACTOR * retry) {
    fail(
      `renewDeadlineMs (${renew}) must be greater than retryPeriodMs * ${JITTER_FACTOR} (${JITTER_FACTOR * retry})`,
    );
  }
  return config;
}

/** wait.Jitter(retryPeriod, 1.2): a value in [retryPeriod, retryPeriod * 2.2). */
export function jittered(retryPeriodMs: number, random: () => number = Math.random): number {
  return retryPeriodMs + random() * JITTER_FACTOR * retryPeriodMs;
}

/** What a Lease's spec says (client-go's LeaderElectionRecord); times in epoch ms, as written. */
export interface LeaseRecord {
  holderIdentity: string;
  leaseDurationSeconds: number;
  acquireTimeMs: number | undefined;
  renewTimeMs: number | undefined;
  leaseTransitions: number;
}

/** This replica's sight of the Lease: the record, and the local time it was last seen to change. */
export interface Observation {
  record: LeaseRecord;
  /** The record as compared (client-go compares the raw record's bytes). */
  raw: string;
  observedAtMs: number;
}

/** Keeps `prev` (and so its time) while the record is unchanged; a changed record is observed now. */
export function observe(prev: Observation | undefined, record: LeaseRecord, nowMs: number): Observation {
  const raw = JSON.stringify(record);
  if (prev && prev.raw === raw) return prev;
  return { record, raw, observedAtMs: nowMs };
}

/**
 * Whether the holder may still be leading. Judged by the local time this replica saw the record change plus
 * the duration the holder wrote (client-go's isLeaseValid): never by the renewTime inside the object, which
 * another machine's clock wrote. An empty holder (a released lease) is never valid.
 */
export function leaseValid(observation: Observation, nowMs: number): boolean {
  const { holderIdentity, leaseDurationSeconds } = observation.record;
  return holderIdentity !== '' && observation.observedAtMs + leaseDurationSeconds * 1000 > nowMs;
}

/** The record a fresh Lease is created with. */
export function createdRecord(identity: string, leaseDurationMs: number, nowMs: number): LeaseRecord {
  return {
    holderIdentity: identity,
    leaseDurationSeconds: Math.ceil(leaseDurationMs / 1000),
    acquireTimeMs: nowMs,
    renewTimeMs: nowMs,
    leaseTransitions: 0,
  };
}

export type Decision = { kind: 'held'; holder: string } | { kind: 'write'; record: LeaseRecord };

/**
 * tryAcquireOrRenew's choice once the Lease is read: another holder whose lease is still valid keeps it;
 * otherwise write ourselves in. Renewing keeps acquireTime and leaseTransitions; taking over (from another
 * holder or a released lease) sets acquireTime and counts one more transition.
 */
export function decide(
  observation: Observation,
  identity: string,
  leaseDurationMs: number,
  nowMs: number,
): Decision {
  const current = observation.record;
  const mine = current.holderIdentity === identity;
  if (!mine && leaseValid(observation, nowMs)) return { kind: 'held', holder: current.holderIdentity };
  return {
    kind: 'write',
    record: {
      holderIdentity: identity,
      leaseDurationSeconds: Math.ceil(leaseDurationMs / 1000),
      acquireTimeMs: mine ? (current.acquireTimeMs ?? nowMs) : nowMs,
      renewTimeMs: nowMs,
      leaseTransitions: mine ? current.leaseTransitions : current.leaseTransitions + 1,
    },
  };
}

/** ReleaseOnCancel's record: no holder, 1 s duration, so a standby takes over at its next try. */
export function releasedRecord(current: LeaseRecord, nowMs: number): LeaseRecord {
  return {
    holderIdentity: '',
    leaseDurationSeconds: 1,
    acquireTimeMs: nowMs,
    renewTimeMs: nowMs,
    leaseTransitions: current.leaseTransitions,
  };
}

/**
 * Fencing: leading only while the last successful write (timed when it was sent) is younger than the renew
 * deadline. A standby needs a full lease duration from its own sight of that write, which came after it was
 * sent; renewDeadline < leaseDuration, so this turns false before anyone else can acquire.
 */
export function withinRenewDeadline(
  lastRenewMs: number | undefined,
  nowMs: number,
  renewDeadlineMs: number,
): boolean {
  return lastRenewMs !== undefined && nowMs - lastRenewMs < renewDeadlineMs;
}

/** The client hands MicroTime back as the string it read, whatever its type says. */
function timeMs(value: unknown): number | undefined {
  if (!(typeof value === 'string' || value instanceof Date)) return undefined;
  const ms = new Date(value).getTime();
  return Number.isNaN(ms) ? undefined : ms;
}

export function toRecord(lease: V1Lease): LeaseRecord {
  const spec = lease.spec ?? {};
  return {
    holderIdentity: spec.holderIdentity ?? '',
    leaseDurationSeconds: spec.leaseDurationSeconds ?? 0,
    acquireTimeMs: timeMs(spec.acquireTime),
    renewTimeMs: timeMs(spec.renewTime),
    leaseTransitions: spec.leaseTransitions ?? 0,
  };
}

/** `lease` (metadata and resourceVersion kept) with `record` as its spec; times as MicroTime (µs digits). */
export function withRecord(lease: V1Lease, record: LeaseRecord): V1Lease {
  const { acquireTimeMs, renewTimeMs, ...rest } = record;
  const micro = (ms: number) => new V1MicroTime(Math.round(ms));
  return {
    ...lease,
    apiVersion: 'coordination.k8s.io/v1',
    kind: 'Lease',
    spec: {
      ...lease.spec,
      ...rest,
      ...(acquireTimeMs === undefined ? {} : { acquireTime: micro(acquireTimeMs) }),
      ...(renewTimeMs === undefined ? {} : { renewTime: micro(renewTimeMs) }),
    },
  };
}
