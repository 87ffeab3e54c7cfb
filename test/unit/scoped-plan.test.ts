import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { DesiredConfig, DesiredRoute, HaproxyState } from '../../src/haproxy/model.js';
import { DEFAULT_RENDER_OPTIONS, type RenderOptions, renderDesired } from '../../src/haproxy/render.js';
import { slotAllowMapName } from '../../src/haproxy/slot-allow.js';
import type { Plan } from '../../src/plan/plan.js';
import { plan } from '../../src/plan/plan.js';
import { Reading } from '../../src/plan/reading.js';
import { RoutingIndex, RoutingIndexCache } from '../../src/plan/routing-index.js';
import { planScoped, type ScopedPlan } from '../../src/plan/scoped.js';
import { Registry } from '../../src/registry/registry.js';
import { compareStrings, type Route } from '../../src/routes/route.js';
import { PROPERTY_TIMEOUT_MS } from '../support/property.js';

const registry = new Registry();
const HOSTS = 12;
const hostOf = (h: number) => `api.h${h}.example.com`;

/** A desired set: host number -> endpoint ports (sorted, distinct) on one address. */
type Wanted = Map<number, number[]>;

const ports = fc.uniqueArray(fc.integer({ min: 30000, max: 30003 }), { minLength: 1, maxLength: 2 });
const wantedSet = fc
  .array(fc.tuple(fc.integer({ min: 0, max: HOSTS - 1 }), ports), { maxLength: HOSTS })
  .map((pairs) => new Map(pairs.map(([h, p]) => [h, [...p].sort((a, b) => a - b)])));
const change = fc.tuple(
  fc.integer({ min: 0, max: HOSTS - 1 }),
  fc.option(ports, { nil: undefined, freq: 2 }),
);

function routesOf(wanted: Wanted): Route[] {
  return [...wanted].map(([h, p]) => ({
    // Authorized networks that change with the endpoints, so that changes of a list are planned too.
    networks: [
      ...(p.includes(30001) ? ['198.18.1.0/24'] : []),
      ...(p.includes(30002) ? ['2001:db8::/32'] : []),
    ],
    cluster: `c${h}`,
    host: hostOf(h),
    endpoints: p.map((port) => ({ address: '10.0.0.1', port })),
  }));
}

function configOf(wanted: Wanted, options: RenderOptions): DesiredConfig {
  return renderDesired(routesOf(wanted), options);
}

/** Full passes until nothing is left to do (growth ahead of need takes a second pass at most). */
function converge(raw: Reading, config: DesiredConfig, grow: 'ahead' | 'when_needed'): Reading {
  let state = raw;
  for (let i = 0; i < 4; i++) {
    const p = plan(config, state.state, { grow });
    if (p.operations.length === 0) return state;
    state = state.derive(p.operations, registry);
  }
  throw new Error('no convergence');
}

/** A foreign server in the lowest free slot: a stray that only a route with exactly its servers takes. */
function withForeignStray(reading: Reading, port: number): Reading {
  const raw = reading.state;
  const named = new Set(raw.maps?.flatMap((m) => [...m.entries.values()]) ?? []);
  const i = raw.backends.findIndex(
    (b) => b.name.includes('_slot_') && !named.has(b.name) && b.servers.length === 0,
  );
  if (i < 0) return reading;
  const backends = raw.backends.slice();
  const b = backends[i] as HaproxyState['backends'][number];
  const server = {
    name: 'theirs',
    address: '10.0.0.1',
    port,
    check: false,
    tags: { owner: 'x' },
    owned: false,
  };
  backends[i] = { ...b, servers: [...b.servers, server] };
  return Reading.of({ ...raw, backends });
}

function scopedFor(
  index: RoutingIndex,
  config: DesiredConfig,
  hosts: string[],
  grow: 'ahead' | 'when_needed',
): ScopedPlan {
  const routing = config.routing;
  const byHost = new Map<string, DesiredRoute>(routing.routes.map((r) => [r.host, r]));
  return planScoped({
    index,
    routing,
    hosts: [...new Set(hosts)].sort(compareStrings),
    routeAt: (h) => byHost.get(h),
    totalRoutes: routing.routes.length,
    grow,
  });
}

const creates = (p: Plan) => p.operations.some((op) => op.kind === 'create_backend');
const restricted = (m: Map<string, string>, hosts: string[]) =>
  new Map([...m].filter(([h]) => hosts.includes(h)));

const scenario = fc.record({
  history: fc.array(fc.tuple(wantedSet, fc.boolean()), { maxLength: 4 }),
  base: wantedSet,
  minSlots: fc.integer({ min: 1, max: 6 }),
  checks: fc.boolean(),
  strays: fc.array(fc.integer({ min: 30000, max: 30001 }), { maxLength: 2 }),
  steps: fc.array(fc.tuple(fc.array(change, { minLength: 1, maxLength: 4 }), fc.boolean()), {
    minLength: 1,
    maxLength: 5,
  }),
});

type Scenario = typeof scenario extends fc.Arbitrary<infer T> ? T : never;

/** A state a history of full passes left (slots reused out of order, entries in any order), converged on `base`. */
function start(s: Scenario, options: RenderOptions): Reading {
  let raw = Reading.of({ frontends: [], backends: [] });
  for (const [wanted, ahead] of s.history)
    raw = converge(raw, configOf(wanted, options), ahead ? 'ahead' : 'when_needed');
  raw = converge(raw, configOf(s.base, options), 'when_needed');
  for (const port of s.strays) raw = withForeignStray(raw, port);
  return raw;
}

describe('scoped map-routing plan', () => {
  it('plans a few hosts exactly as the full planner does, step after step, and its index follows the applies', {
    timeout: PROPERTY_TIMEOUT_MS,
  }, () => {
    fc.assert(
      fc.property(scenario, (s) => {
        const options = {
          ...DEFAULT_RENDER_OPTIONS,
          minSlots: s.minSlots,
          healthChecks: s.checks,
        };
        let raw = start(s, options);
        let wanted: Wanted = new Map(s.base);
        const cache = new RoutingIndexCache();
        for (const [changes, ahead] of s.steps) {
          const grow = ahead ? 'ahead' : 'when_needed';
          const before = configOf(wanted, options);
          // The precondition: the state is as the desired state wants it, apart from the change.
          if (plan(before, raw.state, { grow }).operations.length > 0) return;
          wanted = withChanges(wanted, changes);
          const config = configOf(wanted, options);
          const hosts = changes.map(([h]) => hostOf(h));
          const full = plan(config, raw.state, { grow });
          const index = cache.for(raw, config);
          const fresh = new RoutingIndex(raw, config);
          expect(summary(index)).toEqual(summary(fresh));
          const scoped = scopedFor(index, config, hosts, grow);
          // It declines exactly when the pool must grow in this plan.
          expect(scoped.doubt !== undefined).toBe(creates(full));
          if (scoped.plan) {
            expect(scoped.plan.operations).toEqual(full.operations);
            expect(scoped.plan.conflicts).toEqual(full.conflicts);
            const { assignments, ...pool } = scoped.plan.pool ?? {};
            const { assignments: all, ...fullPool } = full.pool ?? {};
            expect(pool).toEqual(fullPool);
            expect(assignments).toEqual(restricted(all ?? new Map(), hosts));
          }
          raw = raw.derive(full.operations, registry);
        }
      }),
      { numRuns: 300, seed: 20261203 },
    );
  });
});

/** `wanted` with `changes` made: a host's ports set (sorted), or the host gone. */
function withChanges(
  wanted: Wanted,
  changes: ReadonlyArray<readonly [number, readonly number[] | null | undefined]>,
): Wanted {
  const next = new Map(wanted);
  for (const [h, p] of changes) {
    if (p)
      next.set(
        h,
        [...p].sort((a, b) => a - b),
      );
    else next.delete(h);
  }
  return next;
}

describe('scoped passes against full passes', () => {
  it('leave HAProxy as full passes do after the same changes, one pass per change set', {
    timeout: PROPERTY_TIMEOUT_MS,
  }, () => {
    fc.assert(
      fc.property(scenario, (s) => {
        const options = { ...DEFAULT_RENDER_OPTIONS, minSlots: s.minSlots };
        let scopedRaw = start(s, options);
        let fullRaw = scopedRaw;
        let wanted: Wanted = new Map(s.base);
        const cache = new RoutingIndexCache();
        for (const [changes, ahead] of s.steps) {
          const grow = ahead ? 'ahead' : 'when_needed';
          wanted = withChanges(wanted, changes);
          const config = configOf(wanted, options);
          const hosts = changes.map(([h]) => hostOf(h));
          const index = cache.for(scopedRaw, config);
          // Where the scoped planner declines, the pass falls back to a full one.
          const p = scopedFor(index, config, hosts, grow).plan ?? plan(config, scopedRaw.state, { grow });
          scopedRaw = scopedRaw.derive(p.operations, registry);
          const full = plan(config, fullRaw.state, { grow });
          fullRaw = fullRaw.derive(full.operations, registry);
        }
        expect(scopedRaw.state).toEqual(fullRaw.state);
      }),
      { numRuns: 200, seed: 31 },
    );
  });
});

describe('scoped plan: when it declines', () => {
  const options = { ...DEFAULT_RENDER_OPTIONS, minSlots: 4 };
  const two: Wanted = new Map([
    [1, [30001]],
    [2, [30002]],
  ]);
  const base = () => converge(Reading.of({ frontends: [], backends: [] }), configOf(two, options), 'ahead');
  const add3 = configOf(new Map([...two, [3, [30003]]]), options);
  const declines = (raw: Reading) =>
    scopedFor(new RoutingIndex(raw, add3), add3, [hostOf(3)], 'when_needed').doubt;

  it('plans a new host in a clean state', () => {
    expect(declines(base())).toBeUndefined();
  });

  it('declines when a slot no entry names holds our servers (an add cut short): a full pass takes or clears it', () => {
    const raw = base();
    const cut = raw.derive(
      [
        {
          kind: 'create_server',
          backend: 'kubebyon_slot_00004',
          server: { name: 'srv1', address: '10.0.0.9', port: 30009, check: true },
        },
      ],
      registry,
    );
    expect(declines(cut)).toMatch(/holds servers/);
  });

  it('declines when an entry names no slot of ours, or the frontend differs from the desired one', () => {
    const raw = base().state;
    const entries = new Map(raw.maps?.[0]?.entries);
    entries.set('api.hand.example.com', 'their_backend');
    expect(declines(Reading.of({ ...raw, maps: [{ name: options.sniMap, entries }] }))).toMatch(/entry/);
    const frontends = raw.frontends.map((f) => ({ ...f, inspectDelayMs: 1 }));
    expect(declines(Reading.of({ ...raw, frontends }))).toMatch(/structure/);
  });

  it('declines while an allow key names no slot of ours, built or advanced, and not once it does', () => {
    const raw = base();
    const map = options.allowMap;
    const stray = {
      kind: 'add_allow_entry',
      map,
      key: '198.18.0.0/16|kubebyon_slot_00099',
      stage: 'entry',
    } as const;
    expect(declines(raw.derive([stray], registry))).toMatch(/allow key/);
    // Advanced: the stray key comes, goes, and comes back before its slot is made.
    const index = new RoutingIndex(raw, add3);
    const withStray = raw.derive([stray], registry);
    expect(index.advance(withStray)).toBe(true);
    expect(index.doubt).toMatch(/allow key/);
    const gone = withStray.derive([{ ...stray, kind: 'delete_allow_entry' }], registry);
    expect(index.advance(gone)).toBe(true);
    expect(index.doubt).toBeUndefined();
    const again = gone.derive([stray], registry);
    expect(index.advance(again)).toBe(true);
    expect(index.doubt).toMatch(/allow key/);
    // A slot without its guard (an install from before per-slot allow maps): the full planner writes it.
    const name = 'kubebyon_slot_00099';
    const bare = again.derive(
      [{ kind: 'create_backend', backend: { name, balance: 'leastconn' } }],
      registry,
    );
    expect(new RoutingIndex(bare, add3).doubt).toMatch(/lacks its guard/);
    const allowMap = slotAllowMapName(map, name);
    const slot = again.derive(
      [{ kind: 'create_backend', backend: { name, balance: 'leastconn', allowMap } }],
      registry,
    );
    expect(index.advance(slot)).toBe(true);
    expect(index.doubt).toBeUndefined();
    expect(new RoutingIndex(slot, add3).doubt).toBeUndefined();
  });

  it('declines when the new host finds no free slot (a reload first)', () => {
    const three = new Map([...two, [4, [30004]]]);
    const four = new Map([...three, [5, [30005]]]);
    // Four slots for three routes; the fourth takes the last free one and defers growth.
    let raw = converge(Reading.of({ frontends: [], backends: [] }), configOf(three, options), 'ahead');
    raw = converge(raw, configOf(four, options), 'when_needed');
    const config = configOf(new Map([...four, [3, [30003]]]), options);
    const i = new RoutingIndex(raw, config);
    expect([i.slots.size, i.free.length]).toEqual([4, 0]);
    expect(scopedFor(i, config, [hostOf(3)], 'when_needed').doubt).toMatch(/no free slot/);
  });
});

function summary(index: RoutingIndex) {
  return {
    doubt: index.doubt,
    free: index.free.map((s) => s.name),
    strays: [...index.strays].map((s) => s.name).sort(),
    named: index.named,
    slots: [...index.slots.values()]
      .sort((a, b) => compareStrings(a.name, b.name))
      .map((s) => [s.name, s.refs, s.backend]),
    entries: [...index.entries],
  };
}
