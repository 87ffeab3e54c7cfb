import { describe, expect, it } from 'vitest';
import {
  createdRecord,
  DEFAULT_TIMINGS,
  decide,
  JITTER_FACTOR,
  jittered,
  LeaderElectionConfigError,
  type LeaseConfig,
  type LeaseRecord,
  leaseValid,
  observe,
  releasedRecord,
  toRecord,
  validateLeaseConfig,
  withinRenewDeadline,
  withRecord,
} from '../../src/kube/lease-rules.js';

const base: LeaseConfig = { namespace: 'ns', name: 'lease', identity: 'a', ...DEFAULT_TIMINGS };
const held = (holder: string, extra: Partial<LeaseRecord> = {}): LeaseRecord => ({
  holderIdentity: holder,
  leaseDurationSeconds: 15,
  acquireTimeMs: 1_000,
  renewTimeMs: 5_000,
  leaseTransitions: 3,
  ...extra,
});

describe('validateLeaseConfig (client-go NewLeaderElector checks)', () => {
  it('accepts client-go defaults', () => {
    expect(DEFAULT_TIMINGS).toEqual({
      leaseDurationMs: 15_000,
      renewDeadlineMs: 10_000,
      retryPeriodMs: 2_000,
    });
    expect(validateLeaseConfig(base)).toBe(base);
  });

  it.each([
    [{ leaseDurationMs: 10_000 }, /leaseDurationMs \(10000\) must be greater than renewDeadlineMs \(10000\)/],
    [{ leaseDurationMs: 9_000 }, /must be greater than renewDeadlineMs/],
    [{ retryPeriodMs: 10_000 / 1.2 }, /renewDeadlineMs \(10000\) must be greater than retryPeriodMs \* 1.2/],
    [{ retryPeriodMs: 9_000 }, /retryPeriodMs \* 1.2/],
    [{ retryPeriodMs: 0 }, /retryPeriodMs must be a positive number/],
    [{ leaseDurationMs: Number.NaN }, /leaseDurationMs must be a positive number/],
    [{ renewDeadlineMs: -1 }, /renewDeadlineMs must be a positive number/],
    [{ identity: '' }, /identity must not be empty/],
    [{ name: '' }, /name must not be empty/],
    [{ namespace: '' }, /namespace must not be empty/],
  ])('refuses %o', (patch, message) => {
    expect(() => validateLeaseConfig({ ...base, ...patch })).toThrow(LeaderElectionConfigError);
    expect(() => validateLeaseConfig({ ...base, ...patch })).toThrow(message);
  });

  it('accepts the tightest valid timings', () => {
    expect(() =>
      validateLeaseConfig({ ...base, leaseDurationMs: 1201, renewDeadlineMs: 1200.5, retryPeriodMs: 1000 }),
    ).not.toThrow();
  });
});

describe('jittered (wait.Jitter with factor 1.2)', () => {
  it('spans [retry, retry * 2.2)', () => {
    expect(jittered(500, () => 0)).toBe(500);
    expect(jittered(500, () => 0.5)).toBe(500 + 0.5 * JITTER_FACTOR * 500);
    expect(jittered(500, () => 0.999_999)).toBeLessThan(1100);
  });
});

describe('observe and leaseValid: expiry by local observation time, not by renewTime', () => {
  it('keeps the first observation time while the record is unchanged', () => {
    const first = observe(undefined, held('b'), 100);
    expect(observe(first, held('b'), 9_000)).toBe(first);
    expect(observe(first, held('b', { renewTimeMs: 7_000 }), 9_000).observedAtMs).toBe(9_000);
  });

  it('counts the holder-written duration from when the change was seen here', () => {
    // renewTime says 1970 (a skewed clock wrote it); what counts is when this replica saw the record change.
    const seen = observe(undefined, held('b', { renewTimeMs: 0 }), 100_000);
    expect(leaseValid(seen, 100_000 + 14_999)).toBe(true);
    expect(leaseValid(seen, 100_000 + 15_000)).toBe(false);
  });

  it('treats a released lease (no holder) as expired at once', () => {
    const seen = observe(undefined, held('', { leaseDurationSeconds: 1 }), 100);
    expect(leaseValid(seen, 100)).toBe(false);
  });
});

describe('decide (tryAcquireOrRenew after the read)', () => {
  it('leaves a valid lease of another holder alone', () => {
    const seen = observe(undefined, held('b'), 1_000);
    expect(decide(seen, 'a', 15_000, 2_000)).toEqual({ kind: 'held', holder: 'b' });
  });

  it('takes over an expired lease: new acquireTime, one more transition', () => {
    const seen = observe(undefined, held('b'), 1_000);
    expect(decide(seen, 'a', 15_000, 16_000)).toEqual({
      kind: 'write',
      record: {
        holderIdentity: 'a',
        leaseDurationSeconds: 15,
        acquireTimeMs: 16_000,
        renewTimeMs: 16_000,
        leaseTransitions: 4,
      },
    });
  });

  it('renews its own lease even while valid: keeps acquireTime and the transition count', () => {
    const seen = observe(undefined, held('a'), 1_000);
    expect(decide(seen, 'a', 3_000, 2_000)).toEqual({
      kind: 'write',
      record: {
        holderIdentity: 'a',
        leaseDurationSeconds: 3,
        acquireTimeMs: 1_000,
        renewTimeMs: 2_000,
        leaseTransitions: 3,
      },
    });
  });

  it('takes a released lease at once, counting a transition', () => {
    const seen = observe(undefined, releasedRecord(held('b'), 1_000), 1_000);
    const decision = decide(seen, 'a', 15_000, 1_000);
    expect(decision).toMatchObject({ kind: 'write', record: { holderIdentity: 'a', leaseTransitions: 4 } });
  });

  it('writes whole seconds, rounded up', () => {
    expect(createdRecord('a', 2_500, 7).leaseDurationSeconds).toBe(3);
    expect(createdRecord('a', 2_500, 7)).toMatchObject({
      leaseTransitions: 0,
      acquireTimeMs: 7,
      renewTimeMs: 7,
    });
  });
});

describe('releasedRecord (ReleaseOnCancel)', () => {
  it('names nobody, lasts 1 s, keeps the transition count', () => {
    expect(releasedRecord(held('a'), 9_000)).toEqual({
      holderIdentity: '',
      leaseDurationSeconds: 1,
      acquireTimeMs: 9_000,
      renewTimeMs: 9_000,
      leaseTransitions: 3,
    });
  });
});

describe('withinRenewDeadline (fencing)', () => {
  it('is true strictly before the deadline from the last successful write', () => {
    expect(withinRenewDeadline(undefined, 0, 10_000)).toBe(false);
    expect(withinRenewDeadline(1_000, 10_999, 10_000)).toBe(true);
    expect(withinRenewDeadline(1_000, 11_000, 10_000)).toBe(false);
  });
});

describe('toRecord and withRecord (the Lease object)', () => {
  it('writes MicroTime with microsecond digits and keeps metadata (resourceVersion) and other spec fields', () => {
    const read = {
      metadata: { name: 'lease', namespace: 'ns', resourceVersion: '42' },
      spec: { holderIdentity: 'b', strategy: 'OldestEmulationVersion' },
    };
    const body = withRecord(
      read,
      held('a', { acquireTimeMs: 1_700_000_000_123.4, renewTimeMs: 1_700_000_001_000 }),
    );
    const json = JSON.parse(JSON.stringify(body));
    expect(json).toEqual({
      apiVersion: 'coordination.k8s.io/v1',
      kind: 'Lease',
      metadata: { name: 'lease', namespace: 'ns', resourceVersion: '42' },
      spec: {
        strategy: 'OldestEmulationVersion',
        holderIdentity: 'a',
        leaseDurationSeconds: 15,
        acquireTime: '2023-11-14T22:13:20.123000Z',
        renewTime: '2023-11-14T22:13:21.000000Z',
        leaseTransitions: 3,
      },
    });
  });

  it('reads back what it wrote, with the strings the client hands back', () => {
    const record = held('a', { acquireTimeMs: 1_700_000_000_123, renewTimeMs: 1_700_000_001_000 });
    expect(toRecord(JSON.parse(JSON.stringify(withRecord({}, record))))).toEqual(record);
  });

  it('reads a bare Lease as released, never renewed, no transitions', () => {
    expect(toRecord({ spec: { renewTime: 'garbage' as unknown as Date } })).toEqual({
      holderIdentity: '',
      leaseDurationSeconds: 0,
      acquireTimeMs: undefined,
      renewTimeMs: undefined,
      leaseTransitions: 0,
    });
  });
});
