import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { DEFAULT_RENDER_OPTIONS, type RenderOptions } from '../../src/haproxy/render.js';
import { createMetrics, type Metrics } from '../../src/metrics/metrics.js';
import type { MemoryProvider } from '../../src/providers/memory/memory-provider.js';
import type { Reconciler } from '../../src/reconcile/reconciler.js';
import type { ClusterStore } from '../../src/store/cluster-store.js';
import { closeReconcilerBed, openReconcilerBed, reconcilerOn, settle } from '../support/reconciler-bed.js';

// Map routing with a small pool: 4 slots at first, grown ×1.5 once 7/8 of it is held (at the 4th route).
const render: RenderOptions = { ...DEFAULT_RENDER_OPTIONS, minSlots: 4 };
const MAP = render.sniMap;

describe('Reconciler with map routing', () => {
  let dir: string;
  let store: ClusterStore;
  let provider: MemoryProvider;
  let metrics: Metrics;
  let reconciler: Reconciler | undefined;
  let logs: Array<{ level: number; msg: string }>;

  const make = (watchMs = 0) => {
    metrics = createMetrics();
    logs = [];
    reconciler = reconcilerOn({ store, provider }, { render, metrics, logs, watchMs });
    return reconciler;
  };
  const add = (name: string, nodePort = 30443) =>
    store.upsert({ name, host: `api.${name}.example.com`, target: { nodePort } });
  const slots = () => provider.state.backends.filter((b) => b.name.startsWith('kubebyon_slot_'));
  const entries = () => provider.state.maps?.find((m) => m.name === MAP)?.entries ?? new Map();
  // As /metrics does: the gauges are brought up to date before a scrape.
  const text = () => {
    metrics.beforeScrape.hook?.();
    return metrics.registry.metrics();
  };
  const reloads = async (result: string, reason: string) => {
    const m = new RegExp(
      `^kubebyon_haproxy_adapter_reloads_total\\{result="${result}",reason="${reason}"\\} (\\d+)$`,
      'm',
    );
    return Number(m.exec(await text())?.[1]);
  };

  beforeEach(async () => {
    ({ dir, store, provider } = await openReconcilerBed('kubebyon-map-reconciler-'));
    reconciler = undefined;
  });
  afterEach(() => closeReconcilerBed(dir, reconciler));

  it('never grows the pool in a webhook pass while a slot is free: a pool_growth pass follows it', async () => {
    const r = make();
    await settle(r.request('start'));
    expect(slots()).toHaveLength(4);
    expect(await reloads('succeeded', 'structure')).toBe(1);
    for (const name of ['a', 'b', 'c']) {
      await add(name);
      expect(await settle(r.request('webhook'))).toEqual({ ok: true, changed: true });
    }
    const applies = provider.applies.length;
    await add('d');
    // What the caller sees when its answer comes: its route in the last free slot, the pool not grown yet.
    const answered = await settle(
      r
        .request('webhook')
        .then((outcome) => ({ outcome, slots: slots().length, applies: provider.applies.length })),
    );
    expect(answered).toEqual({ outcome: { ok: true, changed: true }, slots: 4, applies: applies + 1 });
    expect(entries().get('api.d.example.com')).toMatch(/^kubebyon_slot_0000[1-4]$/);
    expect(provider.applies.at(-1)?.operations.map((op) => op.kind)).not.toContain('create_backend');
    expect(await reloads('succeeded', 'pool_growth')).toBe(0);

    await vi.advanceTimersByTimeAsync(100);
    expect(slots()).toHaveLength(6);
    expect(provider.applies).toHaveLength(applies + 2);
    expect(new Set(provider.applies.at(-1)?.operations.map((op) => op.kind))).toEqual(
      new Set(['create_backend']),
    );
    expect(await reloads('succeeded', 'pool_growth')).toBe(1);
    // Growth done: no further pass.
    await vi.advanceTimersByTimeAsync(5_000);
    expect(provider.applies).toHaveLength(applies + 2);
  });

  it("stamps last_applied_at when a pass moves a cluster's servers in its slot, and only that cluster's", async () => {
    const r = make();
    await add('a', 30443);
    await add('b', 31443);
    await settle(r.request('start'));
    const at = () => new Map(r.statuses().map((s) => [s.name, s.last_applied_at]));
    const before = at();
    await vi.advanceTimersByTimeAsync(60_000);
    await add('a', 30444);
    await settle(r.request('webhook'));
    expect(r.statuses().find((s) => s.name === 'a')?.servers).toEqual(['10.0.0.1:30444', '10.0.0.2:30444']);
    expect(at().get('a')).not.toBe(before.get('a'));
    expect(at().get('b')).toBe(before.get('b'));
  });

  it('reads HAProxy afresh for start, resync and a reload by someone else; not for webhooks', async () => {
    const r = make();
    await add('a');
    const reads: number[] = [];
    for (const reason of ['start', 'webhook', 'resync', 'api', 'haproxy_reloaded', 'pool_growth']) {
      await settle(r.request(reason));
      reads.push(provider.reads);
    }
    // A fresh read is a read of everything; the others answer from the last reading (one revision each).
    expect(reads).toEqual([1, 1, 2, 2, 3, 3]);
  });

  it('puts back within a second what a reload by someone else lost, and counts the repair', async () => {
    provider.revisionToken = 'pid-10/reloads-0';
    const r = make(500);
    await add('a');
    r.start();
    await vi.advanceTimersByTimeAsync(100);
    const slot = entries().get('api.a.example.com');
    expect(slot).toBeDefined();
    // The first token read and then an unchanged one start nothing.
    const reads = provider.reads;
    await vi.advanceTimersByTimeAsync(5_000);
    expect(provider.reads).toBe(reads);

    // Someone reloads HAProxy from files that never got the runtime change: the map entry is gone.
    provider.state = { ...provider.state, maps: [{ name: MAP, entries: new Map() }] };
    provider.revisionToken = 'pid-11/reloads-1';
    await vi.advanceTimersByTimeAsync(1_000);
    expect(entries().get('api.a.example.com')).toBe(slot);
    expect(provider.reads).toBeGreaterThan(reads);
    expect(await text()).toMatch(/^kubebyon_haproxy_adapter_drift_corrections_total 1$/m);
    // Map entries come back at runtime: no reload.
    expect(await reloads('succeeded', 'repair')).toBe(0);

    // One from a configuration without our frontend (and so without its map): put back with a reload, a repair.
    provider.state = { ...provider.state, frontends: [], maps: [] };
    provider.revisionToken = 'pid-12/reloads-2';
    await vi.advanceTimersByTimeAsync(1_000);
    expect(provider.state.frontends.map((f) => f.name)).toEqual(['kubebyon_sni']);
    expect(entries().get('api.a.example.com')).toBe(slot);
    expect(await reloads('succeeded', 'repair')).toBe(1);
    expect(await reloads('succeeded', 'structure')).toBe(1);
  });

  it('logs a failed revision read at debug and keeps watching; a token that moved meanwhile is still seen', async () => {
    provider.revisionToken = 'one';
    const r = make(500);
    r.start();
    await vi.advanceTimersByTimeAsync(100);
    const reads = provider.reads;
    const revision = provider.revision.bind(provider);
    provider.revision = async () => {
      throw new Error('connect ENOENT /run/haproxy-master.sock');
    };
    await vi.advanceTimersByTimeAsync(2_000);
    expect(provider.reads).toBe(reads);
    const failed = logs.filter((l) => l.msg === 'cannot read the HAProxy revision');
    expect(failed.length).toBeGreaterThanOrEqual(3);
    expect(failed.every((l) => l.level === 20)).toBe(true);
    provider.revision = revision;
    provider.revisionToken = 'two';
    await vi.advanceTimersByTimeAsync(1_000);
    expect(provider.reads).toBe(reads + 1);
  });

  it('does not poll the revision when the watch is off (passes still read it)', async () => {
    let asked = 0;
    const revision = provider.revision.bind(provider);
    provider.revision = (signal) => {
      asked++;
      return revision(signal);
    };
    const r = make(0);
    r.start();
    await vi.advanceTimersByTimeAsync(100);
    const afterStart = asked;
    await vi.advanceTimersByTimeAsync(10_000);
    expect(asked).toBe(afterStart);
  });

  it('reports which slot serves each cluster: status, route_backend_info and the pool gauges', async () => {
    const r = make();
    await add('a', 30443);
    await add('b', 31443);
    await settle(r.request('start'));
    const byName = new Map(r.statuses().map((s) => [s.name, s]));
    const a = byName.get('a');
    const b = byName.get('b');
    expect(a).toMatchObject({ state: 'applied', servers: ['10.0.0.1:30443', '10.0.0.2:30443'] });
    expect(b).toMatchObject({ state: 'applied', servers: ['10.0.0.1:31443', '10.0.0.2:31443'] });
    expect(a?.backend).toBe(entries().get('api.a.example.com'));
    expect(b?.backend).toBe(entries().get('api.b.example.com'));
    const info = (await text())
      .split('\n')
      .filter((l) => l.startsWith('kubebyon_haproxy_adapter_route_backend_info{'));
    expect(info.sort()).toEqual(
      [
        `kubebyon_haproxy_adapter_route_backend_info{cluster="a",host="api.a.example.com",backend="${a?.backend}"} 1`,
        `kubebyon_haproxy_adapter_route_backend_info{cluster="b",host="api.b.example.com",backend="${b?.backend}"} 1`,
      ].sort(),
    );
    expect(await text()).toMatch(/^kubebyon_haproxy_adapter_slot_pool_size 4$/m);
    expect(await text()).toMatch(/^kubebyon_haproxy_adapter_slot_pool_free 2$/m);

    await store.delete('a');
    await settle(r.request('webhook'));
    expect(await text()).not.toMatch(/route_backend_info\{cluster="a"/);
    expect(await text()).toMatch(/^kubebyon_haproxy_adapter_slot_pool_free 3$/m);

    // A failed pass changed nothing in HAProxy: b is still reported where it is.
    await add('c');
    provider.failures.push(new Error('connect ECONNREFUSED'));
    expect(await settle(r.request('webhook'))).toMatchObject({ ok: false });
    expect(r.statuses().find((s) => s.name === 'b')).toMatchObject({ state: 'error', backend: b?.backend });
    expect(await text()).toMatch(/route_backend_info\{cluster="b"/);
  });
});
