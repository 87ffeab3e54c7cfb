import { describe, expect, it } from 'vitest';
import type { HaproxyState } from '../../src/haproxy/model.js';
import { DEFAULT_RENDER_OPTIONS, renderDesired } from '../../src/haproxy/render.js';
import { applyOperations } from '../../src/plan/apply.js';
import { plan } from '../../src/plan/plan.js';
import { poolSize } from '../../src/plan/slots.js';
import { Registry } from '../../src/registry/registry.js';
import type { Route } from '../../src/routes/route.js';

const registry = new Registry();
const options = { ...DEFAULT_RENDER_OPTIONS, minSlots: 4, healthChecks: false };
const none: HaproxyState = { frontends: [], backends: [] };
const route = (n: number, port = 30000 + n): Route => ({
  networks: [],
  cluster: `c${n}`,
  host: `api.c${n}.example.com`,
  endpoints: [{ address: '10.0.0.1', port }],
});

/** Plans `routes` against `raw`, applies the plan the one way operations mean, and returns both. */
function step(raw: HaproxyState, routes: Route[], grow: 'ahead' | 'when_needed' = 'ahead') {
  const p = plan(renderDesired(routes, options), raw, { grow });
  return { p, raw: applyOperations(raw, p.operations, registry).state };
}

const mapOf = (raw: HaproxyState) => raw.maps?.find((m) => m.name === options.sniMap)?.entries;
const kinds = (p: ReturnType<typeof plan>) => p.operations.map((o) => o.kind);

describe('map routing plan', () => {
  it('from nothing: a frontend routing by the map, a pool of empty slots, then each route in a slot', () => {
    const { p, raw } = step(none, [route(1), route(2)]);
    expect(p.pool).toMatchObject({ size: 4, free: 2, created: 4 });
    expect(raw.frontends[0]?.sniMap).toBe(options.sniMap);
    expect([...(mapOf(raw) ?? [])]).toEqual([
      ['api.c1.example.com', 'kubebyon_slot_00001'],
      ['api.c2.example.com', 'kubebyon_slot_00002'],
    ]);
    expect(raw.backends.find((b) => b.name === 'kubebyon_slot_00001')?.servers).toHaveLength(1);
    const again = step(raw, [route(1), route(2)]);
    expect(again.p.operations).toEqual([]);
  });

  it('a new route in a pool with room is servers then a map entry, no structure', () => {
    const start = step(none, [route(1)]).raw;
    const { p } = step(start, [route(1), route(2)], 'when_needed');
    expect(kinds(p)).toEqual(['create_server', 'set_map_entry']);
  });

  it('a deleted route: map entry first, then its servers; the slot is reused only by a later plan', () => {
    const start = step(none, [route(1), route(2)]).raw;
    const { p, raw } = step(start, [route(2), route(3)], 'when_needed');
    expect(kinds(p)).toEqual(['create_server', 'delete_map_entry', 'set_map_entry', 'delete_server']);
    const entry = p.operations.find((o) => o.kind === 'set_map_entry');
    expect(entry).toMatchObject({ host: 'api.c3.example.com', backend: 'kubebyon_slot_00003' });
    const later = step(raw, [route(2), route(3), route(4)], 'when_needed');
    expect(later.p.operations.find((o) => o.kind === 'set_map_entry')).toMatchObject({
      backend: 'kubebyon_slot_00001',
    });
  });

  it('an endpoint move is a server update in the same slot', () => {
    const start = step(none, [route(1)]).raw;
    const { p } = step(start, [route(1, 31999)], 'when_needed');
    expect(kinds(p)).toEqual(['update_server']);
  });

  it('grows only when allowed or needed, geometrically', () => {
    expect([poolSize(0, 0, 64), poolSize(64, 56, 64), poolSize(96, 5000, 64)]).toEqual([64, 96, 8310]);
    const start = step(none, [route(1), route(2), route(3)]).raw;
    const deferred = step(
      start,
      [1, 2, 3, 4].map((n) => route(n)),
      'when_needed',
    );
    expect(deferred.p.pool).toMatchObject({ size: 4, growthDeferred: true, created: 0 });
    expect(kinds(deferred.p)).toEqual(['create_server', 'set_map_entry']);
    const needed = step(
      deferred.raw,
      [1, 2, 3, 4, 5].map((n) => route(n)),
      'when_needed',
    );
    expect(needed.p.pool).toMatchObject({ size: 6, created: 2, growthDeferred: false });
  });

  it('repairs a map entry deleted by hand and never names a foreign slot-named backend', () => {
    const start = step(none, [route(1)]).raw;
    const entries = new Map(mapOf(start));
    entries.delete('api.c1.example.com');
    const drifted: HaproxyState = { ...start, maps: [{ name: options.sniMap, entries }] };
    expect(kinds(step(drifted, [route(1)]).p)).toEqual(['set_map_entry']);
    const foreign: HaproxyState = registry.interpret({
      frontends: [],
      backends: [{ name: 'kubebyon_slot_00001', balance: 'roundrobin', servers: [], tags: {} }],
    });
    const p = plan(renderDesired([route(1)], options), foreign);
    const created = p.operations.flatMap((o) => (o.kind === 'create_backend' ? [o.backend.name] : []));
    expect(created).not.toContain('kubebyon_slot_00001');
  });

  it('grows past slots draining in the same plan, so every route is placed by the one plan that reloads', () => {
    // Hosts of two routes change at once while a third arrives: both old entries drain, two slots are free.
    const start = step(none, [route(1), route(2)]).raw;
    const moved = (n: number, host: string): Route => ({ ...route(n), host });
    const next = [moved(1, 'api.e.example.com'), moved(2, 'api.a.example.com'), route(3)];
    const { p, raw } = step(start, next, 'when_needed');
    expect(p.pool?.created).toBeGreaterThan(0);
    expect([...(p.pool?.assignments.keys() ?? [])].sort()).toEqual(next.map((r) => r.host).sort());
    expect(step(raw, next, 'when_needed').p.operations).toEqual([]);
  });
});
