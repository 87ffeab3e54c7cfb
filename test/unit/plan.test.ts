import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { BackendState, DesiredConfig, FrontendState, HaproxyState } from '../../src/haproxy/model.js';
import { DEFAULT_RENDER_OPTIONS, type RenderOptions, renderDesired } from '../../src/haproxy/render.js';
import { formatPlan } from '../../src/plan/format.js';
import { plan } from '../../src/plan/plan.js';
import { type Route, resolveRoutes } from '../../src/routes/route.js';
import { applyToState } from '../contract/oracle.js';
import { claimsArb, hostArb } from '../support/arbitraries.js';
import { PROPERTY_TIMEOUT_MS } from '../support/property.js';

const options = { ...DEFAULT_RENDER_OPTIONS, routing: 'rules' as const };

const empty: HaproxyState = { frontends: [], backends: [] };

const foreignFrontend: FrontendState = {
  name: 'console_https',
  owned: false,
  bind: { address: '*', port: 8443 },
  inspectDelayMs: null,
  acceptsTlsHello: false,
  defaultBackend: 'console',
  rules: [{ backend: 'console', host: 'console.example.com', owned: false }],
};
const foreignBackend: BackendState = {
  name: 'console',
  owned: false,
  balance: 'roundrobin',
  servers: [{ name: 'web1', address: '10.9.9.9', port: 8443, check: false, owned: false }],
};

function desiredFor(routes: Route[], opts: Partial<RenderOptions> = {}): DesiredConfig {
  return renderDesired(routes, { ...options, ...opts });
}

function route(cluster: string, host: string, ...endpoints: Array<[string, number]>): Route {
  return { cluster, host, endpoints: endpoints.map(([address, port]) => ({ address, port })) };
}

describe('plan', () => {
  it('creates frontend, backends and servers before the rules that use them', () => {
    const desired = desiredFor([route('demo', 'api.demo.example.com', ['10.0.0.1', 30443])]);
    const p = plan(desired, empty);
    expect(p.conflicts).toEqual([]);
    expect(p.operations.map((o) => o.kind)).toEqual([
      'create_frontend',
      'create_backend',
      'create_server',
      'set_switching_rules',
    ]);
    expect(formatPlan(p).split('\n')).toEqual([
      '+ frontend kubebyon_sni bind *:443 inspect-delay 5000ms default_backend none',
      expect.stringMatching(/^\+ backend kubebyon_demo_[0-9a-f]{12} \(cluster demo\) balance leastconn$/),
      expect.stringMatching(/^\+ server kubebyon_demo_[0-9a-f]{12}\/srv1 10\.0\.0\.1:30443 check$/),
      expect.stringMatching(
        /^\+ rule kubebyon_sni: use_backend kubebyon_demo_[0-9a-f]{12} if \{ req\.ssl_sni -i api\.demo\.example\.com \}$/,
      ),
    ]);
  });

  it('is empty when HAProxy already matches', () => {
    const desired = desiredFor([route('demo', 'api.demo.example.com', ['10.0.0.1', 30443])]);
    const applied = applyToState(empty, plan(desired, empty).operations);
    expect(plan(desired, applied)).toEqual({ operations: [], conflicts: [] });
    expect(formatPlan(plan(desired, applied))).toBe('no changes');
  });

  it('turns a moved endpoint into one server update, not a delete and a create', () => {
    const before = desiredFor([
      route('demo', 'api.demo.example.com', ['10.0.0.1', 30443], ['10.0.0.2', 30443]),
    ]);
    const state = applyToState(empty, plan(before, empty).operations);
    const after = desiredFor([
      route('demo', 'api.demo.example.com', ['10.0.0.1', 30443], ['10.0.0.3', 30443]),
    ]);
    const p = plan(after, state);
    expect(p.operations.map((o) => o.kind)).toEqual(['update_server']);
    expect(formatPlan(p)).toMatch(
      /^~ server kubebyon_demo_[0-9a-f]{12}\/srv2: address 10\.0\.0\.2 -> 10\.0\.0\.3$/,
    );
  });

  it('removes a route: its rule goes before its backend', () => {
    const both = desiredFor([
      route('a', 'a.example.com', ['10.0.0.1', 1]),
      route('b', 'b.example.com', ['10.0.0.1', 2]),
    ]);
    const state = applyToState(empty, plan(both, empty).operations);
    const p = plan(desiredFor([route('a', 'a.example.com', ['10.0.0.1', 1])]), state);
    expect(p.operations.map((o) => o.kind)).toEqual(['set_switching_rules', 'delete_backend']);
    expect(formatPlan(p).split('\n')).toEqual([
      expect.stringMatching(
        /^- rule kubebyon_sni: use_backend kubebyon_b_\w+ if \{ req\.ssl_sni -i b\.example\.com \}$/,
      ),
      expect.stringMatching(/^- backend kubebyon_b_\w+$/),
    ]);
  });

  it('keeps a route without endpoints as a backend with no servers', () => {
    const p = plan(desiredFor([route('empty', 'e.example.com')]), empty);
    expect(p.operations.map((o) => o.kind)).toEqual([
      'create_frontend',
      'create_backend',
      'set_switching_rules',
    ]);
  });

  it('never plans a change to foreign objects, and keeps foreign rules in its own frontend after its own', () => {
    const ownFrontendWithForeignRule: FrontendState = {
      name: 'kubebyon_sni',
      owned: true,
      bind: { address: '*', port: 443 },
      inspectDelayMs: 5000,
      acceptsTlsHello: true,
      defaultBackend: null,
      rules: [{ backend: 'console', host: 'hand.example.com', owned: false }],
    };
    const state: HaproxyState = {
      frontends: [foreignFrontend, ownFrontendWithForeignRule],
      backends: [foreignBackend],
    };
    const p = plan(desiredFor([route('x', 'x.example.com', ['10.0.0.1', 1])]), state);
    const after = applyToState(state, p.operations);
    expect(after.frontends.find((f) => f.name === 'console_https')).toEqual(foreignFrontend);
    expect(after.backends.find((b) => b.name === 'console')).toEqual(foreignBackend);
    expect(after.frontends.find((f) => f.name === 'kubebyon_sni')?.rules.map((r) => r.host)).toEqual([
      'x.example.com',
      'hand.example.com',
    ]);
  });

  it('reports a name taken by a foreign object as a conflict instead of touching it', () => {
    const takenFrontend = { ...foreignFrontend, name: 'kubebyon_sni' };
    expect(
      plan(desiredFor([route('x', 'x.example.com')]), { frontends: [takenFrontend], backends: [] }),
    ).toEqual({
      operations: [],
      conflicts: [expect.objectContaining({ kind: 'frontend_not_owned', name: 'kubebyon_sni' })],
    });
    const desired = desiredFor([route('x', 'x.example.com'), route('y', 'y.example.com')]);
    const squatted = { ...foreignBackend, name: desired.backends[0]?.name ?? '' };
    const p = plan(desired, { frontends: [], backends: [squatted] });
    expect(p.conflicts).toEqual([
      expect.objectContaining({ kind: 'backend_not_owned', name: squatted.name }),
    ]);
    expect(p.operations.some((o) => 'backend' in o && o.backend === squatted.name)).toBe(false);
    expect(applyToState({ frontends: [], backends: [squatted] }, p.operations).backends[0]).toEqual(squatted);
  });

  it('uses a configured foreign default backend, and refuses one that does not exist', () => {
    const withConsole = { frontends: [], backends: [foreignBackend] };
    const ok = plan(desiredFor([], { defaultBackend: 'console' }), withConsole);
    expect(ok.conflicts).toEqual([]);
    expect(applyToState(withConsole, ok.operations).frontends[0]?.defaultBackend).toBe('console');
    const missing = plan(desiredFor([], { defaultBackend: 'nope' }), empty);
    expect(missing.conflicts).toEqual([
      expect.objectContaining({ kind: 'default_backend_missing', name: 'nope' }),
    ]);
    expect(applyToState(empty, missing.operations).frontends[0]?.defaultBackend).toBeNull();
  });
});

// ---- properties over random current/desired pairs ----

const desiredArb = fc
  .tuple(claimsArb, fc.boolean(), fc.constantFrom(443, 8443), fc.boolean())
  .map(([claims, checks, port, withDefault]) => {
    return desiredFor(resolveRoutes(claims).routes, {
      healthChecks: checks,
      bind: { address: '*', port },
      defaultBackend: withDefault ? 'console' : null,
    });
  });

const serverArb = (owned: fc.Arbitrary<boolean>) =>
  fc.record({
    name: fc.constantFrom('srv1', 'srv2', 'srv3', 'web1', 'srv9'),
    address: fc.constantFrom('10.0.0.1', '10.0.0.2', 'fd00::1'),
    port: fc.constantFrom(30000, 30001),
    check: fc.boolean(),
    owned,
  });
const uniqueServers = (owned: fc.Arbitrary<boolean>) =>
  fc.uniqueArray(serverArb(owned), { selector: (s) => s.name, maxLength: 4 });

/** A messy current state: leftovers of earlier desired states, hand-made drift, foreign objects everywhere. */
const currentArb = fc
  .tuple(
    fc.array(desiredArb, { maxLength: 2 }),
    fc.uniqueArray(
      fc.record({
        name: fc.constantFrom('console', 'legacy', 'kubebyon_a_fake'),
        owned: fc.constant(false),
        balance: fc.constantFrom('roundrobin', 'source'),
        servers: uniqueServers(fc.constant(false)),
      }),
      { selector: (b) => b.name, maxLength: 3 },
    ),
    fc.boolean(),
    uniqueServers(fc.boolean()),
    fc.array(
      fc.record({ backend: fc.constantFrom('console', 'legacy'), host: hostArb, owned: fc.constant(false) }),
      {
        maxLength: 2,
      },
    ),
  )
  .map(([history, foreignBackends, withForeignFrontend, drift, foreignRules]) => {
    let state: HaproxyState = { frontends: [], backends: foreignBackends };
    for (const d of history) state = applyToState(state, plan(d, state).operations);
    // Hand-made drift: servers (ours and foreign) dropped into the first owned backend, foreign rules in ours.
    const own = state.backends.find((b) => b.owned);
    if (own) {
      const names = new Set(own.servers.map((s) => s.name));
      own.servers.push(...drift.filter((s) => !names.has(s.name)));
    }
    const ownFrontend = state.frontends.find((f) => f.owned);
    if (ownFrontend) ownFrontend.rules.push(...foreignRules);
    if (withForeignFrontend) state.frontends.push(structuredClone(foreignFrontend));
    return state;
  });

function ownedView(state: HaproxyState) {
  return {
    frontends: state.frontends
      .filter((f) => f.owned)
      .map((f) => ({
        ...f,
        rules: f.rules.filter((r) => r.owned).map(({ backend, host }) => ({ backend, host })),
      })),
    backends: state.backends
      .filter((b) => b.owned)
      .map((b) => ({
        name: b.name,
        cluster: b.cluster,
        balance: b.balance,
        endpoints: b.servers
          .filter((s) => s.owned)
          .map((s) => `${s.address}|${s.port}|${s.check}`)
          .sort(),
      }))
      .sort((x, y) => (x.name < y.name ? -1 : 1)),
  };
}

function expectedView(desired: DesiredConfig, current: HaproxyState) {
  const foreignNames = new Set(current.backends.filter((b) => !b.owned).map((b) => b.name));
  const defaultOk =
    desired.frontend.defaultBackend !== null && foreignNames.has(desired.frontend.defaultBackend);
  return {
    frontends: [
      {
        name: desired.frontend.name,
        owned: true,
        bind: desired.frontend.bind,
        inspectDelayMs: desired.frontend.inspectDelayMs,
        acceptsTlsHello: true,
        defaultBackend: defaultOk ? desired.frontend.defaultBackend : null,
        rules: desired.frontend.rules.filter((r) => !foreignNames.has(r.backend)),
      },
    ],
    backends: desired.backends
      .filter((b) => !foreignNames.has(b.name))
      .map((b) => ({
        name: b.name,
        cluster: b.cluster,
        balance: b.balance,
        endpoints: b.servers.map((s) => `${s.address}|${s.port}|${s.check}`).sort(),
      }))
      .sort((x, y) => (x.name < y.name ? -1 : 1)),
  };
}

function foreignView(state: HaproxyState) {
  return {
    frontends: state.frontends.filter((f) => !f.owned),
    backends: state.backends.filter((b) => !b.owned).sort((x, y) => (x.name < y.name ? -1 : 1)),
    serversInOwnBackends: state.backends
      .filter((b) => b.owned)
      .flatMap((b) => b.servers.filter((s) => !s.owned).map((s) => ({ backend: b.name, ...s }))),
    rulesInOwnFrontends: state.frontends
      .filter((f) => f.owned)
      .flatMap((f) => f.rules.filter((r) => !r.owned)),
  };
}

describe('plan properties', () => {
  it('applying the plan yields the desired owned objects, leaves foreign ones equal, and converges', {
    timeout: PROPERTY_TIMEOUT_MS,
  }, () => {
    fc.assert(
      fc.property(desiredArb, currentArb, (desired, current) => {
        const p = plan(desired, current);
        const after = applyToState(current, p.operations);
        expect(ownedView(after)).toEqual(expectedView(desired, current));
        const foreignBefore = foreignView(current);
        const foreignAfter = foreignView(after);
        expect(foreignAfter.frontends).toEqual(foreignBefore.frontends);
        expect(foreignAfter.rulesInOwnFrontends).toEqual(foreignBefore.rulesInOwnFrontends);
        expect(foreignAfter.backends).toEqual(foreignBefore.backends);
        // Foreign servers inside owned backends stay as they were (they go only with a deleted backend).
        for (const s of foreignAfter.serversInOwnBackends)
          expect(foreignBefore.serversInOwnBackends).toContainEqual(s);
        expect(plan(desired, after).operations).toEqual([]);
      }),
      { numRuns: 500 },
    );
  });

  it('never emits an operation that touches a foreign object', { timeout: PROPERTY_TIMEOUT_MS }, () => {
    fc.assert(
      fc.property(desiredArb, currentArb, (desired, current) => {
        const foreignBackends = new Set(current.backends.filter((b) => !b.owned).map((b) => b.name));
        const foreignFrontends = new Set(current.frontends.filter((f) => !f.owned).map((f) => f.name));
        const foreignServers = new Set(
          current.backends.flatMap((b) =>
            b.servers.filter((s) => !s.owned).map((s) => `${b.name}/${s.name}`),
          ),
        );
        for (const op of plan(desired, current).operations) {
          if (op.kind === 'delete_backend') expect(foreignBackends.has(op.name)).toBe(false);
          if (op.kind === 'update_backend') expect(foreignBackends.has(op.backend.name)).toBe(false);
          if (op.kind === 'create_server' || op.kind === 'update_server' || op.kind === 'delete_server') {
            expect(foreignBackends.has(op.backend)).toBe(false);
            if (op.kind !== 'create_server')
              expect(foreignServers.has(`${op.backend}/${op.server.name}`)).toBe(false);
          }
          if (op.kind === 'delete_frontend' || op.kind === 'set_switching_rules') {
            expect(foreignFrontends.has(op.kind === 'delete_frontend' ? op.name : op.frontend)).toBe(false);
          }
        }
      }),
      { numRuns: 500 },
    );
  });
});
