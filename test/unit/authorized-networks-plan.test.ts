import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { HaproxyState } from '../../src/haproxy/model.js';
import { DEFAULT_RENDER_OPTIONS, type RenderOptions, renderDesired } from '../../src/haproxy/render.js';
import { applyOperations } from '../../src/plan/apply.js';
import { type Operation, plan } from '../../src/plan/plan.js';
import { parseNetwork } from '../../src/routes/networks.js';
import type { Route } from '../../src/routes/route.js';
import { applyToState } from '../contract/oracle.js';
import { interpret, registry } from '../support/owner.js';
import { PROPERTY_TIMEOUT_MS } from '../support/property.js';

// Authorized networks in the planner: what the allow map lets through, checked after every single
// operation of every plan, the way HAProxy looks a source up (`src/haproxy/edge.ts`).

const options: RenderOptions = { ...DEFAULT_RENDER_OPTIONS, minSlots: 4, healthChecks: false };
const NETWORKS = [
  '198.18.0.0/15',
  '198.18.1.0/24',
  '198.18.1.7/32',
  '203.0.113.0/24',
  '2001:db8::/32',
  '2001:db8:1::/48',
  '::1/128',
];
const SOURCES = [
  '198.18.1.7',
  '198.18.1.8',
  '198.19.0.1',
  '203.0.113.9',
  '192.0.2.1',
  '2001:db8:1::5',
  '2001:db8:2::1',
  '::1',
];
const HOSTS = ['a.example.com', 'b.example.com', 'c.example.com', 'd.example.com', 'e.example.com'];

type Want = Map<string, { cluster: string; networks: string[] }>;

function routesOf(want: Want): Route[] {
  return [...want].map(([host, w]) => ({
    cluster: w.cluster,
    host,
    endpoints: [{ address: '127.0.0.1', port: 30000 + HOSTS.indexOf(host) }],
    networks: [...w.networks].sort(),
  }));
}

function bitsOf(ip: string): { family: 4 | 6; bits: bigint } {
  const n = parseNetwork(ip);
  if (!n.ok) throw new Error(ip);
  return n.network;
}

function contains(network: string, ip: string): boolean {
  const n = parseNetwork(network);
  const a = bitsOf(ip);
  if (!n.ok || n.network.family !== a.family) return false;
  const width = a.family === 4 ? 32 : 128;
  const shift = BigInt(width - n.network.prefix);
  return a.bits >> shift === n.network.bits >> shift;
}

/** What HAProxy does with a ClientHello for `host` from `ip` in `state`: closed, refused, or let in. */
function decide(state: HaproxyState, host: string, ip: string): 'closed' | 'refused' | 'allowed' {
  const slot = state.maps?.find((m) => m.name === options.sniMap)?.entries.get(host);
  if (slot === undefined) return 'closed';
  const allow = state.maps?.find((m) => m.name === options.allowMap)?.entries ?? new Map<string, string>();
  if (!allow.has(slot)) return 'allowed';
  for (const key of allow.keys()) {
    const [network, owner] = key.split('|');
    if (owner === slot && network && contains(network, ip)) return 'allowed';
  }
  return 'refused';
}

const lets = (w: { networks: string[] } | undefined, ip: string) =>
  w !== undefined && (w.networks.length === 0 || w.networks.some((n) => contains(n, ip)));

const wantArb: fc.Arbitrary<Want> = fc
  .array(
    fc.record({
      host: fc.constantFrom(...HOSTS),
      cluster: fc.constantFrom('c1', 'c2', 'c3', 'c4', 'c5', 'c6'),
      networks: fc.uniqueArray(fc.constantFrom(...NETWORKS), { maxLength: 3 }),
    }),
    { maxLength: 5 },
  )
  .map((list) => {
    const want: Want = new Map();
    const clusters = new Set<string>();
    for (const r of list) {
      if (want.has(r.host) || clusters.has(r.cluster)) continue;
      clusters.add(r.cluster);
      want.set(r.host, { cluster: r.cluster, networks: r.networks });
    }
    return want;
  });

describe('authorized networks: the plan', () => {
  it('never refuses a source both lists allow, never lets in one neither allows, after any single operation', {
    timeout: PROPERTY_TIMEOUT_MS,
  }, () => {
    fc.assert(
      fc.property(fc.array(wantArb, { minLength: 1, maxLength: 6 }), (steps) => {
        let state: HaproxyState = interpret({ frontends: [], backends: [] });
        let before: Want = new Map();
        for (const want of steps) {
          const desired = renderDesired(routesOf(want), options);
          const p = plan(desired, state);
          let s = state;
          for (const op of p.operations) {
            s = applyOperations(s, [op], registry).state;
            for (const host of HOSTS)
              for (const ip of SOURCES) {
                const old = before.get(host);
                const now = want.get(host);
                const d = decide(s, host, ip);
                // A cluster that keeps its host (the same cluster, before and after).
                const same = old !== undefined && now !== undefined && old.cluster === now.cluster;
                if (same && lets(old, ip) && lets(now, ip)) expect(d, `${host} ${ip}`).toBe('allowed');
                if (d === 'allowed')
                  expect(lets(old, ip) || lets(now, ip), `${host} ${ip} let in`).toBe(true);
                // A host handed to another cluster: its new cluster's list from the moment it routes there.
                if (d === 'allowed' && !same && now !== undefined && old !== undefined)
                  expect(lets(old, ip) || lets(now, ip)).toBe(true);
              }
          }
          // Once applied: exactly the new lists, and nothing more to do.
          for (const host of HOSTS)
            for (const ip of SOURCES) {
              const now = want.get(host);
              expect(decide(s, host, ip), `${host} ${ip} after`).toBe(
                now === undefined ? 'closed' : lets(now, ip) ? 'allowed' : 'refused',
              );
            }
          expect(plan(desired, s).operations).toEqual([]);
          // The oracle (written apart) agrees on both maps.
          const byName = (x: HaproxyState) =>
            Object.fromEntries((x.maps ?? []).map((m) => [m.name, [...m.entries].sort()]));
          expect(byName(s)).toEqual(byName(applyToState(state, p.operations)));
          state = s;
          before = want;
        }
      }),
      { numRuns: 200 },
    );
  });

  it('a slot freed by one cluster holds no key of its list when the next takes it', () => {
    const one: Want = new Map([['a.example.com', { cluster: 'c1', networks: ['198.18.1.0/24'] }]]);
    const other: Want = new Map([['b.example.com', { cluster: 'c2', networks: [] }]]);
    let state: HaproxyState = interpret({ frontends: [], backends: [] });
    for (const want of [one, new Map(), other] as Want[]) {
      const p = plan(renderDesired(routesOf(want), options), state);
      state = applyOperations(state, p.operations, registry).state;
    }
    const sni = state.maps?.find((m) => m.name === options.sniMap)?.entries;
    expect(sni?.get('b.example.com')).toBe('kubebyon_slot_00001');
    expect([...(state.maps?.find((m) => m.name === options.allowMap)?.entries.keys() ?? [])]).toEqual([]);
    expect(decide(state, 'b.example.com', '192.0.2.1')).toBe('allowed');
  });

  it('orders a change of list: new keys and flags before the SNI map, old keys after', () => {
    const open: Want = new Map([['a.example.com', { cluster: 'c1', networks: [] }]]);
    const closed: Want = new Map([['a.example.com', { cluster: 'c1', networks: ['198.18.1.0/24'] }]]);
    const moved: Want = new Map([['a.example.com', { cluster: 'c1', networks: ['203.0.113.0/24'] }]]);
    let state: HaproxyState = interpret({ frontends: [], backends: [] });
    const steps: Operation[][] = [];
    for (const want of [open, closed, moved, open]) {
      const p = plan(renderDesired(routesOf(want), options), state);
      steps.push([...p.operations]);
      state = applyOperations(state, p.operations, registry).state;
    }
    const text = (ops: Operation[]) =>
      ops.flatMap((o) =>
        o.kind === 'add_allow_entry' || o.kind === 'delete_allow_entry'
          ? [`${o.kind === 'add_allow_entry' ? '+' : '-'}${o.key} ${o.stage}`]
          : [],
      );
    expect(text(steps[1] as Operation[])).toEqual([
      '+198.18.1.0/24|kubebyon_slot_00001 entry',
      '+kubebyon_slot_00001 flag',
    ]);
    expect(text(steps[2] as Operation[])).toEqual([
      '+203.0.113.0/24|kubebyon_slot_00001 entry',
      '-198.18.1.0/24|kubebyon_slot_00001 after',
    ]);
    expect(text(steps[3] as Operation[])).toEqual([
      '-kubebyon_slot_00001 open',
      '-203.0.113.0/24|kubebyon_slot_00001 after',
    ]);
  });

  it('adds IPv4 networks also as mapped IPv6 when the bind takes both families', () => {
    const want: Want = new Map([
      ['a.example.com', { cluster: 'c1', networks: ['198.18.1.0/24', '2001:db8::/32'] }],
    ]);
    const dual = { ...options, bind: { address: '::', port: 443 } };
    const p = plan(renderDesired(routesOf(want), dual), interpret({ frontends: [], backends: [] }));
    const keys = p.operations.flatMap((o) => (o.kind === 'add_allow_entry' ? [o.key] : []));
    expect(keys.sort()).toEqual(
      [
        'kubebyon_slot_00001',
        '198.18.1.0/24|kubebyon_slot_00001',
        '::ffff:198.18.1.0/120|kubebyon_slot_00001',
        '2001:db8::/32|kubebyon_slot_00001',
      ].sort(),
    );
  });
});
