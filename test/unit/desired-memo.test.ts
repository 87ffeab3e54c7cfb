import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { DEFAULT_RENDER_OPTIONS } from '../../src/haproxy/render.js';
import type { ClusterRecord, ClusterTarget } from '../../src/model/cluster.js';
import { DesiredRoutesMemo, desiredRoutes } from '../../src/reconcile/desired.js';
import { desiredConfig } from '../../src/reconcile/pass.js';
import type { Topology, TopologyAnswer } from '../../src/topology/topology.js';
import { PROPERTY_TIMEOUT_MS } from '../support/property.js';

/** Node addresses that can change, with a revision that moves when they do (and counts its answers). */
class MovingTopology implements Topology {
  asked = 0;
  rev = 0;
  constructor(public nodes: readonly string[]) {}
  synced = () => true;
  revision(): number {
    return this.rev;
  }
  endpointsFor(target: ClusterTarget): TopologyAnswer {
    this.asked++;
    if (!('nodePort' in target)) return { endpoints: [], problem: 'service_lookup_unavailable' };
    if (this.nodes.length === 0) return { endpoints: [], problem: 'no_nodes' };
    return { endpoints: this.nodes.map((address) => ({ address, port: target.nodePort })) };
  }
  move(nodes: readonly string[]) {
    this.nodes = nodes;
    this.rev++;
  }
}

const record = (name: string, host: string, claimedAt: number, port = 30000): ClusterRecord => ({
  name,
  host,
  target: { nodePort: port },
  claimedAt,
  updatedAt: claimedAt,
});
const sorted = (m: Map<string, ClusterRecord>) =>
  [...m.values()].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));

describe('DesiredRoutesMemo', () => {
  it('validates again only the records that changed, and all of them when the topology moves', () => {
    const topology = new MovingTopology(['10.0.0.1']);
    const memo = new DesiredRoutesMemo(topology);
    const records = Array.from({ length: 100 }, (_, i) => record(`c${i}`, `c${i}.example.com`, i));
    memo.routesFor(records);
    expect(memo.revalidated).toBe(100);
    const same = memo.routesFor([...records]);
    expect(memo.revalidated).toBe(0);
    expect(memo.routesFor(records)).toBe(same);
    const changed = records.slice();
    changed[7] = record('c7', 'c7.example.com', 7, 31000);
    const next = memo.routesFor(changed);
    expect(memo.revalidated).toBe(1);
    expect(next.routes.find((r) => r.cluster === 'c7')?.endpoints).toEqual([
      { address: '10.0.0.1', port: 31000 },
    ]);
    // The earlier answer is left as it was.
    expect(same.routes.find((r) => r.cluster === 'c7')?.endpoints[0]?.port).toBe(30000);
    topology.move(['10.0.0.2']);
    const moved = memo.routesFor(changed);
    expect(memo.revalidated).toBe(100);
    expect(moved.routes.every((r) => r.endpoints[0]?.address === '10.0.0.2')).toBe(true);
  });

  it('renders an unchanged desired state to the same config, and a changed one anew', () => {
    const topology = new MovingTopology(['10.0.0.1']);
    const render = { ...DEFAULT_RENDER_OPTIONS, routing: 'map' as const };
    const records = [record('a', 'a.example.com', 1), record('b', 'b.example.com', 2)];
    const first = desiredConfig(records, topology, render).config;
    expect(desiredConfig([...records], topology, render).config).toBe(first);
    const changed = desiredConfig(
      [records[0] as ClusterRecord, record('b', 'b.example.com', 2, 31000)],
      topology,
      render,
    );
    expect(changed.config).not.toBe(first);
    expect(changed.config.routing?.routes.map((r) => r.servers[0]?.port)).toEqual([30000, 31000]);
    // The unchanged route's rendering is kept.
    expect(changed.config.routing?.routes[0]).toBe(first.routing?.routes[0]);
  });

  it('asks a topology without a revision afresh every time', () => {
    const moving = new MovingTopology(['10.0.0.1']);
    const topology: Topology & { asked: number } = {
      synced: () => true,
      endpointsFor: (t) => moving.endpointsFor(t),
      get asked() {
        return moving.asked;
      },
    };
    const memo = new DesiredRoutesMemo(topology);
    const records = [record('a', 'a.example.com', 1), record('b', 'b.example.com', 2)];
    memo.routesFor(records);
    memo.routesFor(records);
    expect(topology.asked).toBe(4);
  });

  it('hands a host to the next claim when its holder goes or changes host', () => {
    const memo = new DesiredRoutesMemo(new MovingTopology(['10.0.0.1']));
    const first = [record('a', 'x.example.com', 1), record('b', 'x.example.com', 2)];
    expect(memo.routesFor(first).rejected.map((r) => r.cluster)).toEqual(['b']);
    const moved = [record('a', 'y.example.com', 3), first[1] as ClusterRecord];
    const answer = memo.routesFor(moved);
    expect(answer.routes.map((r) => [r.host, r.cluster])).toEqual([
      ['x.example.com', 'b'],
      ['y.example.com', 'a'],
    ]);
    expect(answer.rejected).toEqual([]);
    expect(memo.routesFor([first[1] as ClusterRecord]).routes.map((r) => r.cluster)).toEqual(['b']);
  });

  it('answers exactly as desiredRoutes does, over any sequence of changes', () => {
    const hosts = [
      'a.example.com',
      'B.example.com',
      'b.example.com.',
      'c.example.com',
      'bad_host',
      '10.0.0.1',
    ];
    const change = fc.oneof(
      fc.record({
        kind: fc.constant('put' as const),
        name: fc.constantFrom('a', 'b', 'c', 'd', 'e', 'bad name'),
        host: fc.constantFrom(...hosts),
        claimedAt: fc.integer({ min: 0, max: 3 }),
        port: fc.constantFrom(30000, 31000, 0, 70000),
        service: fc.boolean(),
      }),
      fc.record({ kind: fc.constant('delete' as const), name: fc.constantFrom('a', 'b', 'c', 'd') }),
      fc.record({
        kind: fc.constant('move' as const),
        nodes: fc.constantFrom([], ['10.0.0.1'], ['::1', '10.0.0.2']),
      }),
    );
    fc.assert(
      fc.property(fc.array(change, { maxLength: 30 }), (changes) => {
        const topology = new MovingTopology(['10.0.0.1']);
        const memo = new DesiredRoutesMemo(topology);
        const state = new Map<string, ClusterRecord>();
        for (const c of changes) {
          if (c.kind === 'move') topology.move(c.nodes);
          else if (c.kind === 'delete') state.delete(c.name);
          else {
            const target: ClusterTarget = c.service
              ? { service: { namespace: 'ns', name: c.name, port: 443 } }
              : { nodePort: c.port };
            state.set(c.name, { name: c.name, host: c.host, target, claimedAt: c.claimedAt, updatedAt: 0 });
          }
          const records = sorted(state);
          expect(memo.routesFor(records)).toEqual(desiredRoutes(records, topology));
        }
      }),
      { numRuns: 300 },
    );
  });

  it('brings single clusters up to date (update) to the same answers, cluster by cluster and host by host', {
    timeout: PROPERTY_TIMEOUT_MS,
  }, () => {
    const hosts = ['a.example.com', 'b.example.com', 'c.example.com', 'bad_host'];
    const names = ['a', 'b', 'c', 'd', 'e'];
    const change = fc.record({
      name: fc.constantFrom(...names),
      host: fc.option(fc.constantFrom(...hosts), { nil: undefined, freq: 3 }),
      claimedAt: fc.integer({ min: 0, max: 3 }),
      port: fc.constantFrom(30000, 31000, 70000),
      full: fc.boolean(),
    });
    fc.assert(
      fc.property(fc.array(change, { maxLength: 25 }), (changes) => {
        const topology = new MovingTopology(['10.0.0.1']);
        const memo = new DesiredRoutesMemo(topology);
        const state = new Map<string, ClusterRecord>();
        memo.routesFor([]);
        for (const c of changes) {
          if (c.host === undefined) state.delete(c.name);
          else state.set(c.name, record(c.name, c.host, c.claimedAt, c.port));
          const records = sorted(state);
          const want = desiredRoutes(records, topology);
          if (c.full) {
            expect(memo.routesFor(records)).toEqual(want);
            continue;
          }
          expect(memo.current()).toBe(true);
          memo.update(new Map([[c.name, state.get(c.name)]]));
          expect(memo.routeCount).toBe(want.routes.length);
          for (const name of names) {
            const route = want.routes.find((r) => r.cluster === name);
            const rejected = want.rejected.find((r) => r.cluster === name);
            expect(memo.lookup(name).route).toEqual(route);
            expect(memo.lookup(name).rejected).toEqual(rejected);
          }
          for (const host of hosts)
            expect(memo.routeAt(host)).toEqual(want.routes.find((r) => r.host === host));
        }
        expect(memo.routesFor(sorted(state))).toEqual(desiredRoutes(sorted(state), topology));
      }),
      { numRuns: 300 },
    );
  });
});
