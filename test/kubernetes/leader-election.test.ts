import { setTimeout as sleep } from 'node:timers/promises';
import { CoordinationV1Api, CoreV1Api, KubernetesObjectApi } from '@kubernetes/client-node';
import pino from 'pino';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { LeaderElector } from '../../src/kube/leader-election.js';
import { JITTER_FACTOR, LeaderElectionConfigError } from '../../src/kube/lease-rules.js';
import { chartRbac } from '../support/chart.js';
import { type KubeApiserver, startKubeApiserver } from '../support/kube-apiserver.js';
import { waitFor } from '../support/wait.js';

// Leader election against a real kube-apiserver, as the adapter's ServiceAccount with only what
// the chart's RBAC grants (get/create/update on leases in kubebyon-system).
const NAMESPACE = 'kubebyon-system';
const TIMINGS = { leaseDurationMs: 3_000, renewDeadlineMs: 2_000, retryPeriodMs: 500 };
/** The longest pause between two tries of a standby: wait.Jitter(retryPeriod, 1.2). */
const MAX_PAUSE = TIMINGS.retryPeriodMs * (1 + JITTER_FACTOR);
/** Request times and the 10-20 ms polling of the test on two busy cores. */
const MARGIN = 400;

interface Member {
  id: string;
  elector: LeaderElector;
  started: number;
  stopped: number;
  terms: AbortSignal[];
  newLeaders: string[];
  /** The warnings it logged, as `msg: err`. */
  warnings: string[];
  /** Date.now() of the last sample at which isLeader() was true. */
  lastTrueAt: number | undefined;
}

function member(kube: KubeApiserver, lease: string, id: string): Member {
  const m: Omit<Member, 'elector'> = {
    id,
    started: 0,
    stopped: 0,
    terms: [],
    newLeaders: [],
    warnings: [],
    lastTrueAt: undefined,
  };
  const elector = new LeaderElector(
    { namespace: NAMESPACE, name: lease, identity: id, ...TIMINGS },
    {
      kubeConfig: kube.adapter,
      logger: pino(
        { level: 'warn' },
        {
          write: (line: string) => {
            const { msg, err } = JSON.parse(line) as { msg: string; err?: string };
            m.warnings.push(`${msg}: ${err}`);
          },
        },
      ),
      callbacks: {
        onStartedLeading: (signal) => {
          m.started += 1;
          m.terms.push(signal);
        },
        onStoppedLeading: () => {
          m.stopped += 1;
        },
        onNewLeader: (identity) => {
          m.newLeaders.push(identity);
        },
      },
    },
  );
  return Object.assign(m, { elector });
}

/** Electors on one Lease, and a sampler that reads every isLeader() every 20 ms while they run. */
class Group {
  readonly members: Member[];
  samples = 0;
  readonly overlaps: string[][] = [];
  private readonly sampler: NodeJS.Timeout;

  constructor(kube: KubeApiserver, lease: string, size: number) {
    this.members = Array.from({ length: size }, (_, i) => member(kube, lease, `${lease}-${i}`));
    this.sampler = setInterval(() => this.sample(), 20);
    for (const m of this.members) m.elector.start();
  }

  sample(): Member[] {
    const leading = this.members.filter((m) => m.elector.isLeader());
    this.samples += 1;
    for (const m of leading) m.lastTrueAt = Date.now();
    if (leading.length > 1) this.overlaps.push(leading.map((m) => m.id));
    return leading;
  }

  /** Waits for a leader among `candidates`, polling every 10 ms. */
  async leader(timeoutMs: number, candidates = this.members): Promise<Member> {
    const found = await waitFor(() => candidates.find((m) => m.elector.isLeader()), timeoutMs, 'a leader', {
      everyMs: 10,
    });
    return found as Member;
  }

  async close(): Promise<void> {
    clearInterval(this.sampler);
    await Promise.all(this.members.map((m) => m.elector.stop()));
  }
}

describe('Lease leader election against a real kube-apiserver', () => {
  let kube: KubeApiserver;
  let leases: CoordinationV1Api;
  let group: Group | undefined;
  const lease = (name: string) => leases.readNamespacedLease({ name, namespace: NAMESPACE });

  beforeAll(async () => {
    kube = await startKubeApiserver();
    await kube.admin.makeApiClient(CoreV1Api).createNamespace({ body: { metadata: { name: NAMESPACE } } });
    const objects = kube.admin.makeApiClient(KubernetesObjectApi);
    for (const manifest of chartRbac()) await objects.create(manifest);
    // The adapter may read leases once RBAC has taken effect: a missing one is then 404, not 403.
    const adapterLeases = kube.adapter.makeApiClient(CoordinationV1Api);
    await waitFor(
      () =>
        adapterLeases
          .readNamespacedLease({ name: 'none', namespace: NAMESPACE })
          .catch((err: { code?: number }) => err.code === 404),
      10_000,
      'the granted RBAC to take effect',
    );
    leases = kube.admin.makeApiClient(CoordinationV1Api);
  }, 300_000);

  afterEach(async () => {
    await group?.close();
    group = undefined;
  });

  afterAll(async () => {
    await kube?.stop();
  });

  it('elects exactly one of three, which keeps leading, and never two at once', async () => {
    group = new Group(kube, 'one', 3);
    const leader = await group.leader(10_000);
    await sleep(TIMINGS.leaseDurationMs + 1_000);

    expect(group.sample().map((m) => m.id)).toEqual([leader.id]);
    expect(group.members.map((m) => m.started)).toEqual(group.members.map((m) => (m === leader ? 1 : 0)));
    for (const m of group.members) {
      expect(m.elector.leader()).toBe(leader.id);
      expect(m.newLeaders).toEqual([leader.id]);
    }
    const spec = (await lease('one')).spec;
    expect(spec).toMatchObject({ holderIdentity: leader.id, leaseDurationSeconds: 3, leaseTransitions: 0 });
    // MicroTime: microsecond digits, as the API server writes and expects them.
    expect(String(spec?.renewTime)).toMatch(/\.\d{6}Z$/);
    expect(group.samples).toBeGreaterThan(150);
    expect(group.overlaps).toEqual([]);
  });

  it('hands over after a leader crashes: not before its renew deadline, within the lease bound', async () => {
    group = new Group(kube, 'crash', 3);
    const crashed = await group.leader(10_000);
    await sleep(1_000);
    const before = (await lease('crash')).spec;

    const crashAt = Date.now();
    await crashed.elector.abandon();
    const standbys = group.members.filter((m) => m !== crashed);
    const next = await group.leader(15_000, standbys);
    const takeoverMs = Date.now() - crashAt;
    console.log(`leader-election: takeover after a crash took ${takeoverMs} ms`);

    // Its last renewal was sent before the crash, so its own isLeader() turned false within the deadline;
    // standbys wait a lease duration from when they saw that renewal, then up to one pause to try again.
    expect(crashed.lastTrueAt ?? 0).toBeLessThan(crashAt + TIMINGS.renewDeadlineMs);
    expect(crashed.elector.isLeader()).toBe(false);
    expect(takeoverMs).toBeGreaterThanOrEqual(TIMINGS.renewDeadlineMs);
    expect(takeoverMs).toBeLessThanOrEqual(TIMINGS.leaseDurationMs + 2 * MAX_PAUSE + MARGIN);
    const after = (await lease('crash')).spec;
    expect(after?.holderIdentity).toBe(next.id);
    expect(after?.leaseTransitions).toBe((before?.leaseTransitions ?? -1) + 1);
    expect(String(after?.acquireTime)).not.toBe(String(before?.acquireTime));
    expect(crashed.stopped).toBe(0);
    expect(group.overlaps).toEqual([]);
  });

  it('hands over at the next try after a graceful stop releases the lease', async () => {
    group = new Group(kube, 'stop', 3);
    const stopped = await group.leader(10_000);
    const term = stopped.terms[0];
    await sleep(1_000);

    const stopAt = Date.now();
    await stopped.elector.stop();
    expect(stopped.elector.isLeader()).toBe(false);
    expect(stopped.stopped).toBe(1);
    expect(term?.aborted).toBe(true);
    const next = await group.leader(10_000);
    const takeoverMs = Date.now() - stopAt;
    console.log(`leader-election: takeover after stop() took ${takeoverMs} ms`);

    expect(next).not.toBe(stopped);
    expect(takeoverMs).toBeLessThanOrEqual(MAX_PAUSE + MARGIN);
    expect(takeoverMs).toBeLessThan(TIMINGS.leaseDurationMs);
    expect((await lease('stop')).spec?.leaseTransitions).toBe(1);
    expect(group.overlaps).toEqual([]);
  });

  it('stops leading within the renew deadline while the API server is down, and leads again after', async () => {
    group = new Group(kube, 'down', 2);
    const first = await group.leader(10_000);
    const term = first.terms[0];
    await sleep(1_000);
    const warningsBefore = group.members.map((m) => m.warnings.length);

    await kube.down();
    const downAt = Date.now();
    try {
      await waitFor(() => !first.elector.isLeader(), TIMINGS.renewDeadlineMs + MARGIN, 'leadership to end', {
        everyMs: 10,
      });
      const lostMs = Date.now() - downAt;
      console.log(`leader-election: isLeader() false ${lostMs} ms after kube-apiserver went down`);
      await waitFor(() => first.stopped === 1, MARGIN, 'onStoppedLeading');
      expect(term?.aborted).toBe(true);
      // Nobody leads while nobody can renew; stay down well past the deadline.
      await sleep(Math.max(0, downAt + TIMINGS.leaseDurationMs + 500 - Date.now()));
      expect(group.sample().map((m) => m.id)).toEqual([]);
    } finally {
      const upAt = Date.now();
      await kube.up();
      console.log(`leader-election: kube-apiserver ready again after ${Date.now() - upAt} ms`);
    }
    const readyAt = Date.now();
    await group.leader(TIMINGS.leaseDurationMs + 2 * MAX_PAUSE + MARGIN);
    console.log(`leader-election: a leader again ${Date.now() - readyAt} ms after that`);

    // A dozen failed tries each, but each kind of error warned once (refused, timed out, forbidden while
    // the restarted API server's RBAC warms up).
    const warnings = group.members.map((m, i) => m.warnings.slice(warningsBefore[i]));
    for (const logged of warnings) {
      expect(new Set(logged).size, logged.join('\n')).toBe(logged.length);
      expect(logged.length, logged.join('\n')).toBeLessThanOrEqual(4);
    }
    expect(group.overlaps).toEqual([]);
  });

  it('refuses timings client-go refuses, before any request', () => {
    const deps = { kubeConfig: kube.adapter, logger: pino({ level: 'silent' }), callbacks: noCallbacks };
    const make = (timings: object) =>
      new LeaderElector({ namespace: NAMESPACE, name: 'config', identity: 'x', ...timings }, deps);
    expect(() => make({ leaseDurationMs: 2_000, renewDeadlineMs: 2_000 })).toThrow(
      /leaseDurationMs \(2000\) must be greater than renewDeadlineMs \(2000\)/,
    );
    expect(() => make({ renewDeadlineMs: 2_400, retryPeriodMs: 2_000 })).toThrow(
      /renewDeadlineMs \(2400\) must be greater than retryPeriodMs \* 1.2/,
    );
    expect(() => make({ retryPeriodMs: 0 })).toThrow(LeaderElectionConfigError);
    expect(() => new LeaderElector({ namespace: NAMESPACE, name: 'config', identity: '' }, deps)).toThrow(
      /identity must not be empty/,
    );
    expect(make({}).config).toMatchObject({
      leaseDurationMs: 15_000,
      renewDeadlineMs: 10_000,
      retryPeriodMs: 2_000,
    });
  });
});

const noCallbacks = { onStartedLeading: () => {}, onStoppedLeading: () => {} };
