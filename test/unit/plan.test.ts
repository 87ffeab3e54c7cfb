import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { DesiredConfig, HaproxyState } from '../../src/haproxy/model.js';
import { DEFAULT_RENDER_OPTIONS, type RenderOptions, renderDesired } from '../../src/haproxy/render.js';
import { formatPlan } from '../../src/plan/format.js';
import { type Plan, plan } from '../../src/plan/plan.js';
import { type Route, resolveRoutes } from '../../src/routes/route.js';
import { applyToState } from '../contract/oracle.js';
import { claimsArb, hostArb } from '../support/arbitraries.js';
import { legacyBackendName, legacyRulesState } from '../support/legacy-rules.js';
import { interpret, registry } from '../support/owner.js';
import { PROPERTY_TIMEOUT_MS } from '../support/property.js';

const options: RenderOptions = { ...DEFAULT_RENDER_OPTIONS, minSlots: 4 };
const empty: HaproxyState = { frontends: [], backends: [] };

const foreign = interpret({
  frontends: [
    {
      name: 'console_https',
      bind: { address: '*', port: 8443 },
      inspectDelayMs: null,
      acceptsTlsHello: false,
      defaultBackend: 'console',
      rules: [{ backend: 'console', host: 'console.example.com', tags: {} }],
      tags: {},
    },
  ],
  backends: [
    {
      name: 'console',
      balance: 'roundrobin',
      servers: [{ name: 'web1', address: '10.9.9.9', port: 8443, check: false, tags: {} }],
      tags: {},
    },
  ],
});

function desiredFor(routes: Route[], opts: Partial<RenderOptions> = {}): DesiredConfig {
  return renderDesired(routes, { ...options, ...opts });
}

function route(cluster: string, host: string, ...endpoints: Array<[string, number]>): Route {
  return { cluster, host, endpoints: endpoints.map(([address, port]) => ({ address, port })), networks: [] };
}

const kinds = (p: Plan) => p.operations.map((o) => o.kind);
const mapOf = (s: HaproxyState) => s.maps?.find((m) => m.name === options.sniMap)?.entries ?? new Map();

describe('plan', () => {
  it('makes the frontend and the slots, then the servers, then the map entries that name them', () => {
    const p = plan(desiredFor([route('demo', 'api.demo.example.com', ['10.0.0.1', 30443])]), empty);
    expect(p.conflicts).toEqual([]);
    expect(kinds(p)).toEqual([
      'create_frontend',
      ...Array(5).fill('create_backend'),
      'create_server',
      'set_map_entry',
    ]);
    expect(formatPlan(p).split('\n')).toEqual([
      `+ frontend kubebyon_sni bind *:443 inspect-delay 5000ms default_backend none sni_map ${options.sniMap}` +
        ` guard maxconn=8000,per_source=500/1000/100000,reject_unknown=true,allow_map=${options.allowMap},refusals=kubebyon_refusals`,
      ...[1, 2, 3, 4].map((n) => `+ backend kubebyon_slot_0000${n} (slot) balance leastconn`),
      '+ backend kubebyon_refusals (table) stick-table type string len 64 size 100k store gpc0',
      '+ server kubebyon_slot_00001/srv1 10.0.0.1:30443 check',
      `+ map ${options.sniMap}: api.demo.example.com -> kubebyon_slot_00001 (cluster demo)`,
    ]);
  });

  it('moves an install from before map routing to the map in one plan: every host routed by its slot, the old rules and backends gone', () => {
    const routes = [
      route('a', 'a.example.com', ['10.0.0.1', 30001]),
      route('b', 'b.example.com', ['10.0.0.1', 30002], ['10.0.0.2', 30002]),
    ];
    const old = legacyRulesState(routes, registry, {
      // A rule another tool added to our frontend stays, after the map rule's place.
      rules: [
        ...(legacyRulesState(routes, registry).frontends[0]?.rules ?? []),
        { backend: 'console', host: 'console.example.com', tags: {} },
      ],
    });
    const current = interpret({ ...old, backends: [...old.backends, ...foreign.backends] });
    const p = plan(desiredFor(routes), current);
    expect(kinds(p)[0]).toBe('update_frontend');
    const after = applyToState(current, p.operations);
    expect(after.frontends[0]?.sniMap).toBe(options.sniMap);
    expect(after.frontends[0]?.rules.map((r) => [r.backend, r.owned])).toEqual([['console', false]]);
    const names = after.backends.map((b) => b.name);
    for (const r of routes) expect(names).not.toContain(legacyBackendName(r.cluster));
    expect(names).toContain('console');
    for (const r of routes) {
      const slot = after.backends.find((b) => b.name === mapOf(after).get(r.host));
      expect(slot?.servers.map((s) => `${s.address}:${s.port}`)).toEqual(
        r.endpoints.map((e) => `${e.address}:${e.port}`),
      );
    }
    // Creations come before the removals, so one reload moves every host from its rule to its map entry.
    const at = (k: string) => kinds(p).indexOf(k as Plan['operations'][number]['kind']);
    expect(at('set_map_entry')).toBeLessThan(at('set_switching_rules'));
    expect(at('set_switching_rules')).toBeLessThan(at('delete_backend'));
    expect(plan(desiredFor(routes), after).operations).toEqual([]);
  });

  it('applies nothing while a foreign frontend holds its name, and says so', () => {
    const taken = interpret({
      frontends: [
        {
          ...(foreign.frontends[0] as (typeof foreign.frontends)[number]),
          name: 'kubebyon_sni',
          tags: { owner: 'someone-else' },
        },
      ],
      backends: [],
    });
    const p = plan(desiredFor([route('x', 'x.example.com', ['10.0.0.1', 1])]), taken);
    expect(p.operations).toEqual([]);
    expect(p.conflicts.map((c) => c.kind)).toEqual(['frontend_not_owned']);
  });

  it('routes unknown SNI to a default backend only when it is an existing backend of another owner', () => {
    const withConsole = plan(desiredFor([], { defaultBackend: 'console' }), foreign);
    expect(withConsole.conflicts).toEqual([]);
    expect(withConsole.operations[0]).toMatchObject({
      kind: 'create_frontend',
      frontend: { defaultBackend: 'console' },
    });
    const missing = plan(desiredFor([], { defaultBackend: 'nope' }), foreign);
    expect(missing.conflicts.map((c) => c.kind)).toEqual(['default_backend_missing']);
    expect(missing.operations[0]).toMatchObject({
      kind: 'create_frontend',
      frontend: { defaultBackend: null },
    });
  });

  it('deletes an owned frontend of another name and keeps every foreign object', () => {
    const stale = interpret({
      frontends: [
        {
          ...(foreign.frontends[0] as (typeof foreign.frontends)[number]),
          name: 'kubebyon_old',
          tags: registry.tags(),
        },
        ...foreign.frontends,
      ],
      backends: foreign.backends,
    });
    const p = plan(desiredFor([]), stale);
    expect(p.operations.filter((o) => o.kind === 'delete_frontend')).toEqual([
      { kind: 'delete_frontend', name: 'kubebyon_old' },
    ]);
    expect(p.operations.some((o) => o.kind === 'delete_backend')).toBe(false);
  });
});

// ---- properties ----------------------------------------------------------------------------------------

const desiredArb = fc.record({
  claims: claimsArb,
  defaultBackend: fc.constantFrom(null, 'console', 'nope'),
  inspectDelayMs: fc.constantFrom(5000, 3000),
});

/** HAProxy after some earlier plans (a history), with foreign objects beside ours and drift made by hand. */
const currentArb = fc
  .tuple(
    fc.array(desiredArb, { maxLength: 3 }),
    fc.boolean(),
    fc.array(fc.record({ host: hostArb, slot: fc.integer({ min: 1, max: 6 }) }), { maxLength: 2 }),
    fc.boolean(),
  )
  .map(([history, legacy, strayEntries, foreignRule]) => {
    let state: HaproxyState = legacy
      ? interpret({
          ...legacyRulesState([route('old', 'old.example.com', ['10.0.0.1', 30999])], registry),
          backends: [
            ...legacyRulesState([route('old', 'old.example.com', ['10.0.0.1', 30999])], registry).backends,
            ...foreign.backends,
          ],
        })
      : foreign;
    for (const d of history) state = applyToState(state, plan(configOf(d), state).operations);
    // Map entries added by hand (naming slots that may or may not exist), and a foreign rule in our frontend.
    const maps = state.maps?.map((m) => {
      const entries = new Map(m.entries);
      for (const e of strayEntries) entries.set(e.host, `kubebyon_slot_0000${e.slot}`);
      return { name: m.name, entries };
    });
    const frontends = state.frontends.map((f) =>
      f.owned && foreignRule
        ? {
            ...f,
            rules: [...f.rules, { backend: 'console', host: 'hand.example.com', tags: {}, owned: false }],
          }
        : f,
    );
    return { ...state, frontends, ...(maps ? { maps } : {}) };
  });

function configOf(d: {
  claims: Parameters<typeof resolveRoutes>[0];
  defaultBackend: string | null;
  inspectDelayMs: number;
}) {
  return desiredFor(resolveRoutes(d.claims).routes, {
    defaultBackend: d.defaultBackend,
    inspectDelayMs: d.inspectDelayMs,
  });
}

/** Each desired host, its slot's servers once the plan is applied: what routing by SNI would reach. */
function routedView(state: HaproxyState) {
  const entries = mapOf(state);
  const out: Record<string, string[]> = {};
  for (const [host, backend] of entries) {
    const slot = state.backends.find((b) => b.name === backend && b.owned);
    out[host] = (slot?.servers ?? []).map((s) => `${s.address}:${s.port}:${s.check}`).sort();
  }
  return out;
}

function foreignView(state: HaproxyState) {
  return {
    frontends: state.frontends.filter((f) => !f.owned),
    backends: state.backends.filter((b) => !b.owned),
    rulesInOwnFrontends: state.frontends
      .filter((f) => f.owned)
      .flatMap((f) => f.rules.filter((r) => !r.owned)),
  };
}

describe('plan properties', () => {
  it('routes exactly the desired hosts to their servers, leaves foreign objects as they were, and converges', {
    timeout: PROPERTY_TIMEOUT_MS,
  }, () => {
    fc.assert(
      fc.property(desiredArb, currentArb, (d, current) => {
        const desired = configOf(d);
        const p = plan(desired, current);
        const after = applyToState(current, p.operations);
        const want = Object.fromEntries(
          desired.routing.routes.map((r) => [
            r.host,
            r.servers.map((s) => `${s.address}:${s.port}:${s.check}`).sort(),
          ]),
        );
        expect(routedView(after)).toEqual(want);
        const own = after.frontends.filter((f) => f.owned);
        expect(own.map((f) => [f.name, f.sniMap, f.inspectDelayMs])).toEqual([
          [desired.frontend.name, desired.routing.map, desired.frontend.inspectDelayMs],
        ]);
        expect(own[0]?.defaultBackend).toBe(d.defaultBackend === 'console' ? 'console' : null);
        // No owned backend but the pool's slots and the refusals table, and no rule of ours.
        expect(
          after.backends.filter((b) => b.owned && !b.name.startsWith('kubebyon_slot_')).map((b) => b.name),
        ).toEqual(['kubebyon_refusals']);
        expect(own.flatMap((f) => f.rules.filter((r) => r.owned))).toEqual([]);
        expect(foreignView(after)).toEqual(foreignView(current));
        expect(plan(desired, after).operations).toEqual([]);
      }),
      { numRuns: 300 },
    );
  });

  it('never emits an operation that touches a foreign object', { timeout: PROPERTY_TIMEOUT_MS }, () => {
    fc.assert(
      fc.property(desiredArb, currentArb, (d, current) => {
        const foreignBackends = new Set(current.backends.filter((b) => !b.owned).map((b) => b.name));
        const foreignFrontends = new Set(current.frontends.filter((f) => !f.owned).map((f) => f.name));
        for (const op of plan(configOf(d), current).operations) {
          if (op.kind === 'delete_backend') expect(foreignBackends.has(op.name)).toBe(false);
          if (op.kind === 'create_server' || op.kind === 'update_server' || op.kind === 'delete_server')
            expect(foreignBackends.has(op.backend)).toBe(false);
          if (op.kind === 'set_map_entry') expect(foreignBackends.has(op.backend)).toBe(false);
          if (op.kind === 'delete_frontend') expect(foreignFrontends.has(op.name)).toBe(false);
          if (op.kind === 'set_switching_rules') expect(foreignFrontends.has(op.frontend)).toBe(false);
        }
      }),
      { numRuns: 300 },
    );
  });
});
