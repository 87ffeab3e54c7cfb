import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import pino from 'pino';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { DEFAULT_RENDER_OPTIONS } from '../../src/haproxy/render.js';
import { createMetrics, type Metrics } from '../../src/metrics/metrics.js';
import { MemoryProvider } from '../../src/providers/memory/memory-provider.js';
import { ConcurrentChangeError, ReloadFailedError, TerminalError } from '../../src/providers/provider.js';
import { Reconciler, TopologyNotSyncedError } from '../../src/reconcile/reconciler.js';
import { ClusterStore } from '../../src/store/cluster-store.js';
import { StaticTopology, type Topology } from '../../src/topology/topology.js';
import { waitFor } from '../support/wait.js';

const render = DEFAULT_RENDER_OPTIONS;

describe('Reconciler', () => {
  let dir: string;
  let store: ClusterStore;
  let provider: MemoryProvider;
  let metrics: Metrics;
  let reconciler: Reconciler;

  let reconcilerOptions: () => ConstructorParameters<typeof Reconciler>[0];
  const make = (
    overrides: {
      debounceMs?: number;
      maxDelayMs?: number;
      retries?: number;
      nodes?: string[];
      topology?: Topology;
    } = {},
  ) => {
    metrics = createMetrics();
    reconcilerOptions = () => ({
      store,
      topology: overrides.topology ?? new StaticTopology(overrides.nodes ?? ['10.0.0.1', '10.0.0.2']),
      provider,
      render,
      metrics,
      logger: pino({ level: 'silent' }),
      debounceMs: overrides.debounceMs ?? 20,
      maxDelayMs: overrides.maxDelayMs ?? 2000,
      resyncIntervalMs: 0,
      retries: overrides.retries ?? 3,
      publicPort: 443,
      failureBackoffMs: 0,
    });
    reconciler = new Reconciler(reconcilerOptions());
    return reconciler;
  };
  const metric = async (name: string, labels: Record<string, string> = {}) => {
    const m = (await metrics.registry.getMetricsAsJSON()).find((x) => x.name === name);
    const v = m?.values.find((x) => Object.entries(labels).every(([k, val]) => x.labels[k] === val));
    return v?.value ?? 0;
  };

  beforeEach(async () => {
    dir = mkdtempSync(join(tmpdir(), 'kubebyon-reconciler-'));
    store = await ClusterStore.open(join(dir, 'state.json'));
    provider = new MemoryProvider();
  });
  afterEach(async () => {
    await reconciler?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('coalesces a burst of 100 changes into one or two applies', async () => {
    // Generous quiet time: on a loaded machine one fsync can take longer than a short debounce. The first
    // change goes at once; the rest, arriving close behind it, go together once quiet.
    make({ debounceMs: 250, maxDelayMs: 30_000 });
    const outcomes = [];
    // Each upsert waits for its fsync, so the requests arrive spread out as webhooks would.
    for (let i = 0; i < 100; i++) {
      await store.upsert({ name: `c${i}`, host: `c${i}.example.com`, target: { nodePort: 30000 + i } });
      outcomes.push(reconciler.request('webhook'));
    }
    await Promise.all(outcomes);
    expect(provider.applies.length).toBeGreaterThanOrEqual(1);
    expect(provider.applies.length).toBeLessThanOrEqual(2);
    expect(provider.state.backends).toHaveLength(100);
    expect(reconciler.statuses().every((s) => s.state === 'applied')).toBe(true);
  });

  it('applies a change that follows a quiet spell at once, without waiting for the debounce time', async () => {
    make({ debounceMs: 10_000, maxDelayMs: 60_000 });
    await store.upsert({ name: 'demo', host: 'api.demo.example.com', target: { nodePort: 30443 } });
    const started = Date.now();
    expect(await reconciler.request('webhook')).toEqual({ ok: true, changed: true });
    expect(Date.now() - started).toBeLessThan(5_000);
    // A change right behind that pass waits for the quiet time.
    await store.upsert({ name: 'two', host: 'api.two.example.com', target: { nodePort: 30444 } });
    const second = reconciler.request('webhook');
    const waited = await Promise.race([second.then(() => false), sleep(2_000, true)]);
    expect(waited).toBe(true);
    expect(provider.applies).toHaveLength(1);
  });

  it('applies nothing when HAProxy already matches', async () => {
    make();
    await store.upsert({ name: 'demo', host: 'api.demo.example.com', target: { nodePort: 30443 } });
    expect(await reconciler.request('test')).toEqual({ ok: true, changed: true });
    const reads = provider.reads;
    expect(await reconciler.request('test')).toEqual({ ok: true, changed: false });
    expect(provider.applies).toHaveLength(1);
    expect(provider.reads).toBe(reads + 1);
    expect(await metric('kubebyon_haproxy_adapter_reconciles_total', { result: 'unchanged' })).toBe(1);
  });

  it('re-reads and re-plans after a concurrent change, then converges', async () => {
    make();
    provider.failures.push(new ConcurrentChangeError('version mismatch'));
    await store.upsert({ name: 'demo', host: 'api.demo.example.com', target: { nodePort: 30443 } });
    expect(await reconciler.request('test')).toEqual({ ok: true, changed: true });
    expect(provider.reads).toBe(2);
    expect(await metric('kubebyon_haproxy_adapter_transactions_total', { result: 'conflict' })).toBe(1);
    expect(await metric('kubebyon_haproxy_adapter_transactions_total', { result: 'committed' })).toBe(1);
  });

  it('reports error when every attempt fails, and recovers on the next pass', async () => {
    make({ retries: 1 });
    provider.failures.push(new Error('dataplane down'), new Error('dataplane down'));
    await store.upsert({ name: 'demo', host: 'api.demo.example.com', target: { nodePort: 30443 } });
    expect(await reconciler.request('test')).toMatchObject({ ok: false, error: 'dataplane down' });
    expect(reconciler.statuses()[0]).toMatchObject({ state: 'error', reason: 'dataplane down' });
    expect(reconciler.ready).toBe(false);
    expect(await reconciler.request('test')).toEqual({ ok: true, changed: true });
    expect(reconciler.statuses()[0]).toMatchObject({
      state: 'applied',
      api_endpoint: 'https://api.demo.example.com:443',
    });
    expect(reconciler.ready).toBe(true);
  });

  it('repairs drift found by a resync and counts it', async () => {
    make();
    await store.upsert({ name: 'demo', host: 'api.demo.example.com', target: { nodePort: 30443 } });
    await reconciler.request('test');
    const backend = provider.state.backends[0];
    if (!backend) throw new Error('no backend');
    backend.servers = backend.servers.slice(1);
    expect(await reconciler.request('resync')).toEqual({ ok: true, changed: true });
    expect(provider.state.backends[0]?.servers).toHaveLength(2);
    expect(await metric('kubebyon_haproxy_adapter_drift_corrections_total')).toBe(1);
    expect(await reconciler.request('resync')).toEqual({ ok: true, changed: false });
    expect(await metric('kubebyon_haproxy_adapter_drift_corrections_total')).toBe(1);
  });

  it('reports pending, rejected and degraded clusters with their reasons', async () => {
    make({ nodes: [] });
    await store.upsert({ name: 'a', host: 'api.example.com', target: { nodePort: 30443 } }, 1);
    await store.upsert({ name: 'b', host: 'api.example.com', target: { nodePort: 30444 } }, 2);
    await store.upsert(
      { name: 'c', host: 'c.example.com', target: { service: { namespace: 'v', name: 'c', port: 443 } } },
      3,
    );
    expect(reconciler.statuses().map((s) => s.state)).toEqual(['pending', 'pending', 'pending']);
    await reconciler.request('test');
    expect(reconciler.statuses()).toEqual([
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
    make({ topology: { endpointsFor: (t) => nodes.endpointsFor(t), synced: () => synced } });
    await store.upsert({ name: 'demo', host: 'api.demo.example.com', target: { nodePort: 30443 } });
    expect(await reconciler.request('test')).toEqual({
      ok: false,
      changed: false,
      error: 'topology_not_synced',
    });
    expect(provider.reads).toBe(0);
    synced = true;
    expect(await reconciler.request('test')).toEqual({ ok: true, changed: true });
  });

  it('waits for an in-flight pass on stop', async () => {
    make();
    await store.upsert({ name: 'demo', host: 'api.demo.example.com', target: { nodePort: 30443 } });
    let release = () => {};
    provider.gate = new Promise<void>((resolve) => {
      release = resolve;
    });
    const outcome = reconciler.request('test');
    await waitFor(() => provider.reads > 0, 5_000, 'the pass to reach the provider', { everyMs: 5 });
    let stopped = false;
    const stopping = reconciler.stop().then(() => {
      stopped = true;
    });
    await sleep(50);
    // The pass is held at the provider: stop has not returned, and nothing was cut short.
    expect(stopped).toBe(false);
    release();
    await stopping;
    expect(await outcome).toEqual({ ok: true, changed: true });
    expect(provider.state.backends).toHaveLength(1);
    expect(await reconciler.request('late')).toMatchObject({ ok: false, error: 'shutting down' });
  });

  it('aborts a pass that outlives the grace period, leaving HAProxy as it was', async () => {
    make();
    await store.upsert({ name: 'demo', host: 'api.demo.example.com', target: { nodePort: 30443 } });
    provider.gate = new Promise<void>(() => {});
    const outcome = reconciler.request('test');
    await waitFor(() => provider.reads > 0, 5_000, 'the pass to reach the provider', { everyMs: 5 });
    await reconciler.stop(50);
    expect(await outcome).toMatchObject({ ok: false });
    expect(provider.state.backends).toEqual([]);
  });

  it('does not retry an error that retrying cannot fix', async () => {
    make({ retries: 5 });
    await store.upsert({ name: 'demo', host: 'api.demo.example.com', target: { nodePort: 30443 } });
    provider.failures.push(new TerminalError('401 Unauthorized: check KUBEBYON_DATAPLANE_USERNAME/PASSWORD'));
    expect(await reconciler.request('test')).toEqual({
      ok: false,
      changed: false,
      error: '401 Unauthorized: check KUBEBYON_DATAPLANE_USERNAME/PASSWORD',
    });
    expect(provider.reads).toBe(1);
    expect(reconciler.statuses()[0]).toMatchObject({
      state: 'error',
      reason: '401 Unauthorized: check KUBEBYON_DATAPLANE_USERNAME/PASSWORD',
    });
  });

  it('tries a failed pass again by itself, without a new event', async () => {
    make();
    reconciler = new Reconciler({ ...reconcilerOptions(), failureBackoffMs: 50 });
    await store.upsert({ name: 'demo', host: 'api.demo.example.com', target: { nodePort: 30443 } });
    provider.failures.push(new ReloadFailedError('cannot bind socket (Address already in use)'));
    expect(await reconciler.request('test')).toMatchObject({ ok: false });
    await waitFor(() => provider.state.backends.length > 0, 5000, 'the retried pass to apply', {
      everyMs: 20,
    });
    expect(provider.state.backends).toHaveLength(1);
    expect(reconciler.statuses()[0]).toMatchObject({ state: 'applied' });
  });

  it('reports a change applied by the pass that planned from it, even one stored in the same millisecond as the pass began', async () => {
    make();
    // A stamp not earlier than the pass's start: what a store on tmpfs and an idle loop produce within one
    // millisecond. The pass that follows the request plans from this very version.
    await store.upsert(
      { name: 'demo', host: 'api.demo.example.com', target: { nodePort: 30443 } },
      Date.now() + 5,
    );
    expect(await reconciler.request('webhook')).toMatchObject({ ok: true });
    expect(provider.state.backends).toHaveLength(1);
    expect(reconciler.statuses()[0]).toMatchObject({ state: 'applied' });
    // A version stored after that pass is pending until a pass plans from it.
    await store.upsert({ name: 'demo', host: 'api.demo.example.com', target: { nodePort: 30444 } }, 0);
    expect(reconciler.statuses()[0]).toMatchObject({ state: 'pending' });
    await reconciler.request('webhook');
    expect(reconciler.statuses()[0]).toMatchObject({ state: 'applied' });
  });

  it('tries again as soon as HAProxy answers after an outage, not when a long backoff runs out', async () => {
    make();
    // A backoff far longer than the test: only the recovery probe can bring the pass back in time.
    reconciler = new Reconciler({ ...reconcilerOptions(), failureBackoffMs: 60_000, recoveryProbeMs: 20 });
    await store.upsert({ name: 'demo', host: 'api.demo.example.com', target: { nodePort: 30443 } });
    provider.down = new Error('connect ECONNREFUSED 127.0.0.1:5555');
    expect(await reconciler.request('test')).toMatchObject({ ok: false });
    await sleep(200);
    expect(provider.state.backends).toHaveLength(0);
    provider.down = undefined;
    await waitFor(() => provider.state.backends.length > 0, 2000, 'the pass once HAProxy answers', {
      everyMs: 10,
    });
    expect(provider.state.backends).toHaveLength(1);
    expect(reconciler.statuses()[0]).toMatchObject({ state: 'applied' });
  });

  it('leaves a failure with HAProxy answering to the backoff: no retry storm', async () => {
    make();
    reconciler = new Reconciler({ ...reconcilerOptions(), failureBackoffMs: 60_000, recoveryProbeMs: 10 });
    await store.upsert({ name: 'demo', host: 'api.demo.example.com', target: { nodePort: 30443 } });
    provider.failures.push(new ReloadFailedError('cannot bind socket (Address already in use)'));
    expect(await reconciler.request('test')).toMatchObject({ ok: false });
    await sleep(300);
    // The ping answered, so nothing but the 60 s backoff may try again.
    expect(provider.state.backends).toHaveLength(0);
    expect(reconciler.statuses()[0]).toMatchObject({ state: 'error' });
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
    make();
    await store.upsert({ name: 'demo', host: 'api.demo.example.com', target: { nodePort: 30443 } });
    const outcome = await reconciler.request('test');
    expect(outcome).toMatchObject({ ok: false, error: expect.stringMatching(/^frontend_not_owned: /) });
    expect(reconciler.ready).toBe(false);
    expect(reconciler.lastError).toMatch(/^frontend_not_owned: /);
    const [status] = reconciler.statuses();
    expect(status).toMatchObject({ state: 'error', last_applied_at: null });
    expect(status?.reason).toMatch(/^frontend_not_owned: /);
    expect(provider.applies).toEqual([]);
  });

  it('refuses to preview a plan before the topology has been read', async () => {
    const topology: Topology = { synced: () => false, endpointsFor: () => ({ endpoints: [] }) };
    make({ topology });
    await store.upsert({ name: 'demo', host: 'api.demo.example.com', target: { nodePort: 30443 } });
    await expect(reconciler.preview()).rejects.toBeInstanceOf(TopologyNotSyncedError);
    expect(provider.reads).toBe(0);
  });

  it('times each phase of a pass; a pass with nothing to change spends no time applying', async () => {
    make();
    const phaseCount = async (phase: string) => {
      const m = (await metrics.registry.getMetricsAsJSON()).find(
        (x) => x.name === 'kubebyon_haproxy_adapter_reconcile_phase_duration_seconds',
      );
      const v = m?.values.find(
        (x) => (x as { metricName?: string }).metricName?.endsWith('_count') && x.labels.phase === phase,
      );
      return v?.value ?? 0;
    };
    await store.upsert({ name: 'demo', host: 'api.demo.example.com', target: { nodePort: 30443 } });
    await reconciler.request('webhook');
    expect(provider.applies).toHaveLength(1);
    for (const phase of ['render', 'read', 'plan', 'apply']) expect(await phaseCount(phase)).toBe(1);
    await reconciler.request('resync');
    expect(provider.applies).toHaveLength(1);
    for (const phase of ['render', 'read', 'plan']) expect(await phaseCount(phase)).toBe(2);
    expect(await phaseCount('apply')).toBe(1);
  });
});
