import pino from 'pino';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { DEFAULT_RENDER_OPTIONS } from '../../src/haproxy/render.js';
import { createMetrics, type Metrics } from '../../src/metrics/metrics.js';
import { ConcurrentChangeError, ReloadFailedError, TerminalError } from '../../src/model/errors.js';
import type { MemoryProvider } from '../../src/providers/memory/memory-provider.js';
import { Reconciler, TopologyNotSyncedError } from '../../src/reconcile/reconciler.js';
import { OwnedProvider } from '../../src/registry/owned-provider.js';
import type { ClusterStore } from '../../src/store/cluster-store.js';
import type { Clock } from '../../src/timing/clock.js';
import { StaticTopology, type Topology } from '../../src/topology/topology.js';
import { registry } from '../support/owner.js';
import { closeReconcilerBed, openReconcilerBed, settle, settledWithin } from '../support/reconciler-bed.js';

const render = DEFAULT_RENDER_OPTIONS;

describe('Reconciler', () => {
  let dir: string;
  let store: ClusterStore;
  let provider: MemoryProvider;
  let metrics: Metrics;
  let reconciler: Reconciler | undefined;
  /** Fake-clock times at which a pass (or a try within one) read HAProxy through the registry. */
  let reads: number[];

  type Options = ConstructorParameters<typeof Reconciler>[0];
  // Production's backoff and recovery probe unless a test says otherwise.
  const make = (
    overrides: Partial<Pick<Options, 'debounceMs' | 'maxDelayMs' | 'retries' | 'topology' | 'clock'>> &
      Partial<Pick<Options, 'failureBackoffMs' | 'recoveryProbeMs' | 'resyncIntervalMs'>> & {
        nodes?: string[];
      } = {},
  ) => {
    metrics = createMetrics();
    const { nodes, ...rest } = overrides;
    const owned = new OwnedProvider(provider, registry);
    const read = owned.read.bind(owned);
    reads = [];
    owned.read = (signal, options) => {
      reads.push(Date.now());
      return read(signal, options);
    };
    const r = new Reconciler({
      store,
      topology: new StaticTopology(nodes ?? ['10.0.0.1', '10.0.0.2']),
      provider: owned,
      render,
      metrics,
      logger: pino({ level: 'silent' }),
      debounceMs: 20,
      maxDelayMs: 2000,
      resyncIntervalMs: 0,
      retries: 3,
      publicPort: 443,
      ...rest,
    });
    reconciler = r;
    return r;
  };
  /** Fake-clock times at which HAProxy's state was read: one per attempt. */
  const readTimes = (): number[] => reads;
  /** Hosts HAProxy routes (map entries). */
  const routed = () => provider.state.maps?.[0]?.entries.size ?? 0;
  const gaps = (times: number[]) => times.slice(1).map((t, i) => t - (times[i] ?? 0));
  const demo = () =>
    store.upsert({ name: 'demo', host: 'api.demo.example.com', target: { nodePort: 30443 } });
  const metric = async (name: string, labels: Record<string, string> = {}) => {
    const m = (await metrics.registry.getMetricsAsJSON()).find((x) => x.name === name);
    const v = m?.values.find((x) => Object.entries(labels).every(([k, val]) => x.labels[k] === val));
    return v?.value ?? 0;
  };

  beforeEach(async () => {
    ({ dir, store, provider } = await openReconcilerBed('kubebyon-reconciler-'));
    reconciler = undefined;
  });
  afterEach(() => closeReconcilerBed(dir, reconciler));

  it('coalesces a burst of 100 changes into one or two applies', async () => {
    const r = make({ debounceMs: 250, maxDelayMs: 30_000 });
    const outcomes = [];
    // Each upsert waits for its fsync, so the requests arrive spread out as webhooks would.
    for (let i = 0; i < 100; i++) {
      await store.upsert({ name: `c${i}`, host: `c${i}.example.com`, target: { nodePort: 30000 + i } });
      outcomes.push(r.request('webhook'));
    }
    await settle(Promise.all(outcomes));
    expect(provider.applies.length).toBeGreaterThanOrEqual(1);
    expect(provider.applies.length).toBeLessThanOrEqual(2);
    expect(routed()).toBe(100);
    expect(r.statuses().every((s) => s.state === 'applied')).toBe(true);
  });

  it('holds a steady stream of events back no longer than the maximum delay', async () => {
    // A maximum delay that is no multiple of the debounce time: the last wait is cut short to meet it.
    const maxDelayMs = 1000;
    const r = make({ debounceMs: 300, maxDelayMs });
    const times = readTimes();
    await settle(r.request('start'));
    // An event every 100 ms for 5 s, each before the debounce time is up: never quiet.
    for (let i = 0; i < 50; i++) {
      void r.request('webhook');
      await vi.advanceTimersByTimeAsync(100);
    }
    // One pass per maximum delay: a long burst is more than two passes, and none waits longer.
    expect(times.length).toBeGreaterThan(3);
    for (const gap of gaps(times)) expect(gap).toBeLessThanOrEqual(maxDelayMs);
  });

  it('applies a change that follows a quiet spell at once, without waiting for the debounce time', async () => {
    const r = make({ debounceMs: 10_000, maxDelayMs: 60_000 });
    await demo();
    const first = r.request('webhook');
    expect(await settledWithin(first, 0)).toBe(true);
    expect(await first).toEqual({ ok: true, changed: true });
    // A change right behind that pass waits for the quiet time.
    await store.upsert({ name: 'two', host: 'api.two.example.com', target: { nodePort: 30444 } });
    const second = r.request('webhook');
    expect(await settledWithin(second, 9_000)).toBe(false);
    expect(provider.applies).toHaveLength(1);
    expect(await settledWithin(second, 1_000)).toBe(true);
    expect(provider.applies).toHaveLength(2);
  });

  it("joins HAProxy's refusals by backend to the clusters each status names", async () => {
    const r = make();
    await demo();
    await store.upsert({ name: 'other', host: 'api.other.example.com', target: { nodePort: 30444 } });
    await store.upsert({ name: 'third', host: 'api.third.example.com', target: { nodePort: 30445 } });
    await settle(r.request('start'));
    const backendOf = (name: string) => r.statuses().find((s) => s.name === name)?.backend ?? null;
    const demoBackend = backendOf('demo');
    const otherBackend = backendOf('other');
    expect(demoBackend).not.toBeNull();
    expect(otherBackend).not.toBeNull();
    // The refusals table as HAProxy counts it: two routed slots, and one no cluster holds.
    const table = new Map([
      [demoBackend as string, 3],
      [otherBackend as string, 0],
      ['kubebyon_slot_99999', 7],
    ]);
    (provider as MemoryProvider & { refusals: () => Promise<Map<string, number>> }).refusals = async () =>
      table;
    const rows = await r.refusals(AbortSignal.timeout(5_000));
    // What every cluster's status says, joined by hand.
    const expected = r
      .statuses()
      .flatMap((s) =>
        s.backend !== null && table.has(s.backend)
          ? [{ cluster: s.name, host: s.host, count: table.get(s.backend) }]
          : [],
      );
    expect(rows).toEqual(expected);
    expect(rows).toEqual([
      { cluster: 'demo', host: 'api.demo.example.com', count: 3 },
      { cluster: 'other', host: 'api.other.example.com', count: 0 },
    ]);
  });

  it('applies nothing when HAProxy already matches', async () => {
    const r = make();
    await demo();
    expect(await settle(r.request('test'))).toEqual({ ok: true, changed: true });
    const before = reads.length;
    expect(await settle(r.request('test'))).toEqual({ ok: true, changed: false });
    expect(provider.applies).toHaveLength(1);
    expect(reads.length).toBe(before + 1);
    expect(await metric('kubebyon_haproxy_adapter_reconciles_total', { result: 'unchanged' })).toBe(1);
  });

  it('re-reads and re-plans at once after a concurrent change, then converges', async () => {
    const r = make();
    provider.failures.push(new ConcurrentChangeError('version mismatch'));
    await demo();
    const outcome = r.request('test');
    // "Read again" needs no wait: no time passes before the pass has converged.
    expect(await settledWithin(outcome, 0)).toBe(true);
    expect(await outcome).toEqual({ ok: true, changed: true });
    expect(reads.length).toBe(2);
    expect(await metric('kubebyon_haproxy_adapter_transactions_total', { result: 'conflict' })).toBe(1);
    expect(await metric('kubebyon_haproxy_adapter_transactions_total', { result: 'committed' })).toBe(1);
  });

  it('backs off a concurrent change that outlasts the re-reads of a pass, instead of spinning', async () => {
    const retries = 2;
    const failureBackoffMs = 1000;
    const r = make({ retries, failureBackoffMs });
    const times = readTimes();
    for (let i = 0; i <= retries; i++) provider.failures.push(new ConcurrentChangeError('version mismatch'));
    await demo();
    expect(await settle(r.request('test'))).toMatchObject({ ok: false, error: 'version mismatch' });
    expect(reads.length).toBe(retries + 1);
    await vi.advanceTimersByTimeAsync(failureBackoffMs - 1);
    expect(reads.length).toBe(retries + 1);
    await vi.advanceTimersByTimeAsync(1);
    expect(routed()).toBe(1);
    expect(gaps(times)).toEqual([...Array(retries).fill(0), failureBackoffMs]);
  });

  it('reports error when a pass fails, and recovers on the next pass', async () => {
    const r = make();
    provider.failures.push(new Error('dataplane down'));
    await demo();
    expect(await settle(r.request('test'))).toMatchObject({ ok: false, error: 'dataplane down' });
    expect(reads.length).toBe(1);
    expect(r.statuses()[0]).toMatchObject({ state: 'error', reason: 'dataplane down' });
    expect(r.ready).toBe(false);
    expect(await settle(r.request('test'))).toEqual({ ok: true, changed: true });
    expect(r.statuses()[0]).toMatchObject({
      state: 'applied',
      api_endpoint: 'https://api.demo.example.com:443',
    });
    expect(r.ready).toBe(true);
  });

  it('tries a transient failure again by itself, waiting twice as long each time, up to 30 s', async () => {
    const failureBackoffMs = 8_000;
    const r = make({ failureBackoffMs });
    const times = readTimes();
    for (let i = 0; i < 5; i++) provider.failures.push(new Error('503 Service Unavailable'));
    await demo();
    expect(await settle(r.request('test'))).toMatchObject({ ok: false });
    await vi.advanceTimersByTimeAsync(5 * 30_000);
    expect(routed()).toBe(1);
    expect(r.statuses()[0]).toMatchObject({ state: 'applied' });
    const b = failureBackoffMs;
    expect(gaps(times)).toEqual([b, 2 * b, 30_000, 30_000, 30_000]);
    // A success starts the backoff over.
    provider.failures.push(new Error('503 Service Unavailable'));
    await store.upsert({ name: 'two', host: 'api.two.example.com', target: { nodePort: 30444 } });
    await settle(r.request('test'));
    await vi.advanceTimersByTimeAsync(b);
    expect(gaps(times).at(-1)).toBe(b);
    expect(routed()).toBe(2);
  });

  it('never tries a terminal error again by itself, even with a backoff; an event or the resync still runs a pass', async () => {
    const resyncIntervalMs = 600_000;
    const r = make({ retries: 5, failureBackoffMs: 1000, resyncIntervalMs });
    await demo();
    const error = '401 Unauthorized: check KUBEBYON_DATAPLANE_USERNAME/PASSWORD';
    provider.failures.push(new TerminalError(error), new TerminalError(error));
    r.start();
    await vi.advanceTimersByTimeAsync(0);
    expect(reads.length).toBe(1);
    expect(r.statuses()[0]).toMatchObject({ state: 'error', reason: error });
    // Far past every backoff, well short of the resync.
    await vi.advanceTimersByTimeAsync(resyncIntervalMs / 2);
    expect(reads.length).toBe(1);
    expect(await settle(r.request('webhook'))).toEqual({ ok: false, changed: false, error });
    expect(reads.length).toBe(2);
    await vi.advanceTimersByTimeAsync(resyncIntervalMs / 2);
    expect(reads.length).toBe(3);
    expect(r.statuses()[0]).toMatchObject({ state: 'applied' });
  });

  it('repairs drift found by a resync and counts it', async () => {
    const r = make();
    await demo();
    await settle(r.request('test'));
    // Someone removes a server by hand.
    const slot = provider.state.backends.find((b) => b.servers.length > 0);
    if (!slot) throw new Error('no slot with servers');
    provider.state = {
      ...provider.state,
      backends: provider.state.backends.map((b) => (b === slot ? { ...b, servers: b.servers.slice(1) } : b)),
    };
    expect(await settle(r.request('resync'))).toEqual({ ok: true, changed: true });
    expect(provider.state.backends.find((b) => b.name === slot.name)?.servers).toHaveLength(2);
    expect(await metric('kubebyon_haproxy_adapter_drift_corrections_total')).toBe(1);
    expect(await settle(r.request('resync'))).toEqual({ ok: true, changed: false });
    expect(await metric('kubebyon_haproxy_adapter_drift_corrections_total')).toBe(1);
  });

  it('reports pending, rejected and degraded clusters with their reasons', async () => {
    const r = make({ nodes: [] });
    await store.upsert({ name: 'a', host: 'api.example.com', target: { nodePort: 30443 } }, undefined, 1);
    await store.upsert({ name: 'b', host: 'api.example.com', target: { nodePort: 30444 } }, undefined, 2);
    await store.upsert(
      { name: 'c', host: 'c.example.com', target: { service: { namespace: 'v', name: 'c', port: 443 } } },
      undefined,
      3,
    );
    expect(r.statuses().map((s) => s.state)).toEqual(['pending', 'pending', 'pending']);
    await settle(r.request('test'));
    expect(r.statuses()).toEqual([
      expect.objectContaining({
        name: 'a',
        state: 'degraded',
        reason: 'no_nodes',
        api_endpoint: 'https://api.example.com:443',
      }),
      expect.objectContaining({
        name: 'b',
        state: 'rejected',
        reason: expect.stringContaining('already routed to cluster a'),
      }),
      expect.objectContaining({ name: 'c', state: 'degraded', reason: 'service_lookup_unavailable' }),
    ]);
    expect(
      await metric('kubebyon_haproxy_adapter_rejected_routes', { reason: 'host_claimed_by_other_cluster' }),
    ).toBe(1);
    expect(await metric('kubebyon_haproxy_adapter_routes', { state: 'degraded' })).toBe(2);
  });

  it('applies nothing before the topology has been read once', async () => {
    let synced = false;
    const nodes = new StaticTopology(['10.0.0.1']);
    const r = make({ topology: { endpointsFor: (t) => nodes.endpointsFor(t), synced: () => synced } });
    await demo();
    expect(await settle(r.request('test'))).toEqual({
      ok: false,
      changed: false,
      error: 'topology_not_synced',
    });
    expect(reads.length).toBe(0);
    synced = true;
    expect(await settle(r.request('test'))).toEqual({ ok: true, changed: true });
  });

  it('waits for an in-flight pass on stop', async () => {
    const r = make();
    await demo();
    let release = () => {};
    provider.gate = new Promise<void>((resolve) => {
      release = resolve;
    });
    const outcome = r.request('test');
    await vi.advanceTimersByTimeAsync(0);
    expect(reads.length).toBe(1);
    const stopping = r.stop();
    // The pass is held at the provider: stop has not returned, and nothing was cut short.
    expect(await settledWithin(stopping, 5_000)).toBe(false);
    release();
    await settle(stopping);
    expect(await outcome).toEqual({ ok: true, changed: true });
    expect(routed()).toBe(1);
    expect(await r.request('late')).toMatchObject({ ok: false, error: 'shutting down' });
  });

  it('aborts a pass that outlives the grace period, leaving HAProxy as it was', async () => {
    const r = make();
    await demo();
    provider.gate = new Promise<void>(() => {});
    const outcome = r.request('test');
    await vi.advanceTimersByTimeAsync(0);
    expect(reads.length).toBe(1);
    const stopping = r.stop(50);
    expect(await settledWithin(stopping, 49)).toBe(false);
    expect(await settledWithin(stopping, 1)).toBe(true);
    expect(await outcome).toMatchObject({ ok: false });
    expect(provider.state.backends).toEqual([]);
  });

  it('tries a reload HAProxy refused again after the backoff: its cause (a held port) can go away', async () => {
    const r = make({ failureBackoffMs: 50 });
    await demo();
    provider.failures.push(new ReloadFailedError('cannot bind socket (Address already in use)'));
    expect(await settle(r.request('test'))).toMatchObject({ ok: false });
    expect(routed()).toBe(0);
    await vi.advanceTimersByTimeAsync(50);
    expect(routed()).toBe(1);
    expect(r.statuses()[0]).toMatchObject({ state: 'applied' });
  });

  it('reports a change applied by the pass that planned from it, even one stored in the same millisecond as the pass began', async () => {
    const r = make();
    // A stamp not earlier than the pass's start: what a store on tmpfs and an idle loop produce within one
    // millisecond. The pass that follows the request plans from this very version.
    await store.upsert(
      { name: 'demo', host: 'api.demo.example.com', target: { nodePort: 30443 } },
      undefined,
      Date.now() + 5,
    );
    expect(await settle(r.request('webhook'))).toMatchObject({ ok: true });
    expect(routed()).toBe(1);
    expect(r.statuses()[0]).toMatchObject({ state: 'applied' });
    // A version stored after that pass is pending until a pass plans from it.
    await store.upsert(
      { name: 'demo', host: 'api.demo.example.com', target: { nodePort: 30444 } },
      undefined,
      0,
    );
    expect(r.statuses()[0]).toMatchObject({ state: 'pending' });
    await settle(r.request('webhook'));
    expect(r.statuses()[0]).toMatchObject({ state: 'applied' });
  });

  it('tries again as soon as HAProxy answers after an outage, not when a long backoff runs out', async () => {
    const recoveryProbeMs = 20;
    // The longest backoff there is (30 s): only the recovery probe can bring the pass back sooner.
    const r = make({ failureBackoffMs: 30_000, recoveryProbeMs });
    await demo();
    provider.down = new Error('connect ECONNREFUSED 127.0.0.1:5555');
    expect(await settle(r.request('test'))).toMatchObject({ ok: false });
    await vi.advanceTimersByTimeAsync(10_000);
    expect(routed()).toBe(0);
    provider.down = undefined;
    await vi.advanceTimersByTimeAsync(recoveryProbeMs);
    expect(routed()).toBe(1);
    expect(r.statuses()[0]).toMatchObject({ state: 'applied' });
    // The backoff's own try was dropped with the failure it was for: no extra pass when it would have run out.
    const count = reads.length;
    await vi.advanceTimersByTimeAsync(30_000);
    expect(reads.length).toBe(count);
  });

  it('leaves a failure with HAProxy answering to the backoff: no retry storm', async () => {
    const failureBackoffMs = 20_000;
    const r = make({ failureBackoffMs, recoveryProbeMs: 10 });
    await demo();
    provider.failures.push(new ReloadFailedError('cannot bind socket (Address already in use)'));
    expect(await settle(r.request('test'))).toMatchObject({ ok: false });
    // The ping answered, so nothing but the backoff may try again.
    await vi.advanceTimersByTimeAsync(failureBackoffMs - 1);
    expect(reads.length).toBe(1);
    expect(r.statuses()[0]).toMatchObject({ state: 'error' });
    await vi.advanceTimersByTimeAsync(1);
    expect(reads.length).toBe(2);
    expect(r.statuses()[0]).toMatchObject({ state: 'applied' });
  });

  it('reports every route as error, and stays unready, when a foreign frontend holds our name', async () => {
    provider.state = {
      frontends: [
        {
          name: render.frontendName,
          bind: { address: '*', port: 443 },
          inspectDelayMs: null,
          acceptsTlsHello: false,
          defaultBackend: null,
          rules: [],
          tags: {},
        },
      ],
      backends: [],
    };
    const r = make();
    await demo();
    const outcome = await settle(r.request('test'));
    expect(outcome).toMatchObject({ ok: false, error: expect.stringMatching(/^frontend_not_owned: /) });
    expect(r.ready).toBe(false);
    expect(r.lastError).toMatch(/^frontend_not_owned: /);
    const [status] = r.statuses();
    expect(status).toMatchObject({ state: 'error', last_applied_at: null });
    expect(status?.reason).toMatch(/^frontend_not_owned: /);
    expect(provider.applies).toEqual([]);
  });

  it('refuses to preview a plan before the topology has been read', async () => {
    const topology: Topology = { synced: () => false, endpointsFor: () => ({ endpoints: [] }) };
    const r = make({ topology });
    await demo();
    await expect(r.preview()).rejects.toBeInstanceOf(TopologyNotSyncedError);
    expect(reads.length).toBe(0);
  });

  it('stamps last_applied_at with the clock it is given', async () => {
    const at = Date.UTC(2030, 0, 2, 3, 4, 5);
    const clock: Clock = { now: () => at, after: () => () => {} };
    const r = make({ clock });
    await demo();
    expect(await r.request('webhook')).toEqual({ ok: true, changed: true });
    expect(r.statuses()[0]?.last_applied_at).toBe(new Date(at).toISOString());
  });

  it('times each phase of a pass; a pass with nothing to change spends no time applying', async () => {
    const r = make();
    const phaseCount = async (phase: string) => {
      const m = (await metrics.registry.getMetricsAsJSON()).find(
        (x) => x.name === 'kubebyon_haproxy_adapter_reconcile_phase_duration_seconds',
      );
      const v = m?.values.find(
        (x) => (x as { metricName?: string }).metricName?.endsWith('_count') && x.labels.phase === phase,
      );
      return v?.value ?? 0;
    };
    await demo();
    await settle(r.request('webhook'));
    expect(provider.applies).toHaveLength(1);
    for (const phase of ['render', 'read', 'plan', 'apply']) expect(await phaseCount(phase)).toBe(1);
    await settle(r.request('resync'));
    expect(provider.applies).toHaveLength(1);
    for (const phase of ['render', 'read', 'plan']) expect(await phaseCount(phase)).toBe(2);
    expect(await phaseCount('apply')).toBe(1);
  });
});
