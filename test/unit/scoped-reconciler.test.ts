import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { DEFAULT_RENDER_OPTIONS, type RenderOptions } from '../../src/haproxy/render.js';
import { createMetrics, type Metrics } from '../../src/metrics/metrics.js';
import type { MemoryProvider } from '../../src/providers/memory/memory-provider.js';
import type { Reconciler } from '../../src/reconcile/reconciler.js';
import type { ClusterStore } from '../../src/store/cluster-store.js';
import { closeReconcilerBed, openReconcilerBed, reconcilerOn, settle } from '../support/reconciler-bed.js';

describe('Reconciler: scoped passes (map routing)', () => {
  let dir: string;
  let store: ClusterStore;
  let provider: MemoryProvider;
  let metrics: Metrics;
  let reconciler: Reconciler | undefined;
  let logs: Array<{ level: number; msg: string; doubt?: string }>;

  const make = (minSlots: number) => {
    const render: RenderOptions = { ...DEFAULT_RENDER_OPTIONS, minSlots };
    metrics = createMetrics();
    logs = [];
    reconciler = reconcilerOn({ store, provider }, { render, metrics, logs });
    return reconciler;
  };
  const put = (name: string, host = `api.${name}.example.com`, nodePort = 30443) =>
    store.upsert({ name, host, target: { nodePort } });
  const entries = () => provider.state.maps?.[0]?.entries ?? new Map<string, string>();
  const text = () => {
    metrics.beforeScrape.hook?.();
    return metrics.registry.metrics();
  };
  const passes = async (scope: 'full' | 'scoped') =>
    Number(
      new RegExp(`^kubebyon_haproxy_adapter_reconcile_passes_total\\{scope="${scope}"\\} (\\d+)$`, 'm').exec(
        await text(),
      )?.[1],
    );
  // Everything a cluster's status and the per-cluster gauges say, apart from when it was applied.
  const reported = async (r: Reconciler) => ({
    statuses: r.statuses().map(({ last_applied_at: _at, ...s }) => s),
    gauges: (await text())
      .split('\n')
      .filter((l) =>
        /^kubebyon_haproxy_adapter_(routes|rejected_routes|route_backend_info|slot_pool_\w+)\b/.test(l),
      )
      .sort(),
  });

  beforeEach(async () => {
    ({ dir, store, provider } = await openReconcilerBed('kubebyon-scoped-'));
    reconciler = undefined;
  });
  afterEach(() => closeReconcilerBed(dir, reconciler));

  it('plans only the changed clusters; a full pass after them finds nothing to do and reports the same', async () => {
    const r = make(16);
    for (const name of ['a', 'b', 'c']) await put(name);
    await settle(r.request('start'));
    const webhook = async (name: string, change: () => Promise<unknown>) => {
      await change();
      return settle(r.request('webhook', { clusters: [name] }));
    };
    expect(await webhook('d', () => put('d'))).toEqual({ ok: true, changed: true });
    expect(await webhook('a', () => put('a', 'api.a.example.com', 31000))).toEqual({
      ok: true,
      changed: true,
    });
    expect(await webhook('b', () => store.delete('b'))).toEqual({ ok: true, changed: true });
    // c claims d's host: refused (d's is the older claim); then d goes and c is handed the host, in the
    // slot the host has (its servers moved to c's).
    const c = () => put('c', 'api.d.example.com', 32000);
    expect(await webhook('c', c)).toEqual({ ok: true, changed: true });
    expect(r.status('c')).toMatchObject({ state: 'rejected', backend: null });
    const slot = entries().get('api.d.example.com');
    expect(await webhook('d', () => store.delete('d'))).toEqual({ ok: true, changed: true });
    expect(r.status('c')).toMatchObject({ state: 'applied', host: 'api.d.example.com', backend: slot });
    expect(r.status('c')?.servers).toEqual(['10.0.0.1:32000', '10.0.0.2:32000']);
    expect([...entries().keys()].sort()).toEqual(['api.a.example.com', 'api.d.example.com']);
    expect(r.status('a')?.servers).toEqual(['10.0.0.1:31000', '10.0.0.2:31000']);
    expect([await passes('full'), await passes('scoped')]).toEqual([1, 5]);

    const before = await reported(r);
    const applies = provider.applies.length;
    expect(await settle(r.request('api'))).toEqual({ ok: true, changed: false });
    expect(await passes('full')).toBe(2);
    expect(provider.applies).toHaveLength(applies);
    expect(await reported(r)).toEqual(before);
  });

  it('every cluster’s gauges, due after a full pass, touch only the series that changed', async () => {
    const r = make(16);
    for (const name of ['a', 'b']) await put(name);
    await settle(r.request('start'));
    const before = await reported(r);
    // A second full pass within the gauges' interval leaves every cluster's gauges due, for the next pass.
    await settle(r.request('api'));
    await vi.advanceTimersByTimeAsync(1_500);
    await put('c');
    await store.delete('a');
    const set = vi.spyOn(metrics.routeBackendInfo, 'set');
    const removed = vi.spyOn(metrics.routeBackendInfo, 'remove');
    expect(await settle(r.request('webhook', { clusters: ['c', 'a'] }))).toEqual({ ok: true, changed: true });
    // At thousands of clusters a rebuild of every series costs tens of ms on the webhook's path.
    expect(set.mock.calls.map(([labels]) => (labels as { cluster?: string }).cluster)).toEqual(['c']);
    expect(removed.mock.calls.map(([labels]) => (labels as { cluster?: string }).cluster)).toEqual(['a']);
    const after = await reported(r);
    expect(after.gauges.filter((l) => l.includes('cluster="b"'))).toEqual(
      before.gauges.filter((l) => l.includes('cluster="b"')),
    );
    expect(after.gauges.filter((l) => l.includes('cluster="a"'))).toEqual([]);
    expect(after.gauges.filter((l) => l.includes('cluster="c"'))).toHaveLength(1);
    expect(after.gauges).toContain('kubebyon_haproxy_adapter_routes{state="applied"} 2');
  });

  it('a webhook pass that leaves the pool nearly held is still scoped; the growth pass after it is full', async () => {
    const r = make(4);
    for (const name of ['a', 'b', 'c']) await put(name);
    await settle(r.request('start'));
    await put('d');
    expect(await settle(r.request('webhook', { clusters: ['d'] }))).toEqual({ ok: true, changed: true });
    expect(await passes('scoped')).toBe(1);
    await vi.advanceTimersByTimeAsync(100);
    // The pool grew from 4 to 6 slots (besides the refusals table's backend).
    expect(provider.state.backends.filter((b) => !b.table)).toHaveLength(6);
    expect(await passes('full')).toBe(2);
  });

  it('falls back to a full pass when no slot is free for the new hosts, or when anything but a webhook asked', async () => {
    const r = make(4);
    for (const name of ['a', 'b', 'c']) await put(name);
    await settle(r.request('start'));
    // Two new hosts and one free slot: the pool must grow first, which only a full plan does.
    await put('d');
    await put('e');
    const both = Promise.all([
      r.request('webhook', { clusters: ['d'] }),
      r.request('webhook', { clusters: ['e'] }),
    ]);
    expect((await settle(both)).map((o) => o.ok)).toEqual([true, true]);
    expect([await passes('full'), await passes('scoped')]).toEqual([2, 0]);
    expect(logs.some((l) => l.doubt?.includes('no free slot'))).toBe(true);
    expect(entries().size).toBe(5);
    // Close behind the last pass: both requests wait for the debounce and go into one pass.
    await put('f');
    const mixed = Promise.all([r.request('webhook', { clusters: ['f'] }), r.request('api')]);
    await settle(mixed);
    expect(await passes('scoped')).toBe(0);
  });

  it('falls back to a full pass when HAProxy holds what a scoped plan cannot account for (an entry set by hand)', async () => {
    const r = make(16);
    await put('a');
    await settle(r.request('start'));
    // Someone points a host of our map at their own backend.
    const hand = new Map(entries()).set('api.hand.example.com', 'their_backend');
    provider.state = { ...provider.state, maps: [{ name: DEFAULT_RENDER_OPTIONS.sniMap, entries: hand }] };
    await put('b');
    expect(await settle(r.request('webhook', { clusters: ['b'] }))).toEqual({ ok: true, changed: true });
    expect([await passes('full'), await passes('scoped')]).toEqual([2, 0]);
    // The scoped plan is made from the reading kept; its apply finds the revision moved, and stands down.
    expect(logs.some((l) => l.doubt?.includes('changed meanwhile'))).toBe(true);
    expect([...entries().keys()].sort()).toEqual(['api.a.example.com', 'api.b.example.com']);
  });

  it('confirms a scoped plan of nothing against the revision: after a reload by someone else, a full pass', async () => {
    const r = make(16);
    await put('a');
    await settle(r.request('start'));
    expect(await settle(r.request('webhook', { clusters: ['a'] }))).toEqual({ ok: true, changed: false });
    expect([await passes('full'), await passes('scoped')]).toEqual([1, 1]);
    // Someone reloads HAProxy from files that lack a's entry: the kept reading still holds it.
    provider.state = {
      ...provider.state,
      maps: [{ name: DEFAULT_RENDER_OPTIONS.sniMap, entries: new Map() }],
    };
    provider.revisionToken = 'reloaded';
    expect(await settle(r.request('webhook', { clusters: ['a'] }))).toEqual({ ok: true, changed: true });
    expect([await passes('full'), await passes('scoped')]).toEqual([2, 1]);
    expect(logs.some((l) => l.doubt?.includes('changed since the last pass'))).toBe(true);
    expect([...entries().keys()]).toEqual(['api.a.example.com']);
  });

  it('plans with a cluster the cluster that held its host, when the memo is ahead of the last pass (a preview)', async () => {
    const r = make(16);
    await settle(r.request('start'));
    await put('a', 'api.h.example.com');
    await settle(r.request('webhook', { clusters: ['a'] }));
    await put('b', 'api.h.example.com', 31000);
    await settle(r.request('webhook', { clusters: ['b'] }));
    expect(r.status('b')?.state).toBe('rejected');
    // a moves away; a preview sees it before any pass does.
    await put('a', 'api.h2.example.com');
    await r.preview();
    await put('b', 'api.h.example.com', 31001);
    expect(await settle(r.request('webhook', { clusters: ['b'] }))).toEqual({ ok: true, changed: true });
    expect(await passes('scoped')).toBe(3);
    expect(r.status('b')).toMatchObject({ state: 'applied', servers: ['10.0.0.1:31001', '10.0.0.2:31001'] });
    expect(r.status('a')).toMatchObject({ state: 'applied', host: 'api.h2.example.com' });
    expect(entries().get('api.h2.example.com')).toBe(r.status('a')?.backend);
  });

  it('reports a cluster stored again while its scoped pass applied as pending, until the next pass', async () => {
    const r = make(16);
    await settle(r.request('start'));
    await put('a');
    let release = () => {};
    provider.gate = new Promise<void>((resolve) => {
      release = resolve;
    });
    const first = r.request('webhook', { clusters: ['a'] });
    await vi.advanceTimersByTimeAsync(50);
    expect(provider.applies).toHaveLength(1);
    // The pass waits at the provider when a newer version of `a` is stored.
    await put('a', 'api.a.example.com', 31000);
    release();
    provider.gate = undefined;
    expect(await settle(first)).toEqual({ ok: true, changed: true });
    expect(r.status('a')?.state).toBe('pending');
    await settle(r.request('webhook', { clusters: ['a'] }));
    expect(r.status('a')).toMatchObject({ state: 'applied', servers: ['10.0.0.1:31000', '10.0.0.2:31000'] });
    expect(await passes('scoped')).toBe(2);
  });

  it('falls back to a full pass when a foreign frontend holds our name (a conflict that blocks every route)', async () => {
    const r = make(16);
    await put('a');
    await settle(r.request('start'));
    provider.state = {
      ...provider.state,
      frontends: provider.state.frontends.map((f) => ({ ...f, tags: { owner: 'someone-else' } })),
    };
    await put('b');
    const outcome = await settle(r.request('webhook', { clusters: ['b'] }));
    expect(outcome).toMatchObject({ ok: false, error: expect.stringMatching(/frontend_not_owned/) });
    expect([await passes('full'), await passes('scoped')]).toEqual([2, 0]);
    expect(entries().has('api.b.example.com')).toBe(false);
  });
});
