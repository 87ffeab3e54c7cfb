import { describe, expect, it } from 'vitest';
import type { RawState } from '../../src/haproxy/model.js';
import type { Operation, Plan } from '../../src/plan/plan.js';
import { Reading } from '../../src/plan/reading.js';
import { choosePath } from '../../src/providers/dataplaneapi/choose.js';
import { runtimeRequests, runtimeSteps } from '../../src/providers/runtime-steps.js';
import { interpret, ownerTags, ownFrontend } from '../support/owner.js';

const MAP = 'kubebyon-haproxy-adapter.sni.map';
const slot = (n: number, balance = 'leastconn') => ({
  name: `kubebyon_slot_0000${n}`,
  balance,
  servers:
    n === 1 ? [{ name: 'srv1', address: '10.0.0.1', port: 6443, check: false, tags: ownerTags() }] : [],
  tags: ownerTags(),
});
const raw: RawState = {
  frontends: [ownFrontend({ rules: [], sniMap: MAP, defaultBackend: 'kubebyon_slot_00003' })],
  backends: [slot(1), slot(2), slot(3), slot(4, 'source')],
  maps: [{ name: MAP, entries: new Map([['a.example.com', 'kubebyon_slot_00001']]) }],
};
const reading = Reading.of(interpret(raw));
const plan = (...operations: Operation[]): Plan => ({ operations, conflicts: [] });
const server = { name: 'srv1', address: '10.0.0.2', port: 6443, check: false };
const add: Operation[] = [
  { kind: 'create_server', backend: 'kubebyon_slot_00002', server },
  {
    kind: 'set_map_entry',
    map: MAP,
    host: 'b.example.com',
    backend: 'kubebyon_slot_00002',
    previous: null,
    cluster: 'b',
  },
];
const move: Operation = { kind: 'update_server', backend: 'kubebyon_slot_00001', server, changes: [] };

describe('which plans run at runtime (both providers)', () => {
  it('takes servers of slots only a map names and entries of a map HAProxy runs', () => {
    expect(runtimeSteps(plan(...add), reading)).toEqual(add);
    expect(runtimeSteps(plan(move), reading)).toEqual([move]);
    expect(
      runtimeSteps(
        plan({ kind: 'delete_map_entry', map: MAP, host: 'a.example.com', backend: 'x' }),
        reading,
      ),
    ).toHaveLength(1);
  });

  it('leaves to a reload what the runtime cannot do', () => {
    const no = (...ops: Operation[]) => expect(runtimeSteps(plan(...ops), reading)).toBeUndefined();
    // No map running yet, a backend that is not there, one a default names, one without a dynamic balance.
    expect(runtimeSteps(plan(...add), Reading.of(interpret({ ...raw, maps: [] })))).toBeUndefined();
    no({ ...add[1], backend: 'kubebyon_slot_00009' } as Operation);
    no({ kind: 'create_server', backend: 'kubebyon_slot_00003', server });
    no({ kind: 'create_server', backend: 'kubebyon_slot_00004', server });
    // A change of a server's health check is fixed when it is created; structure always reloads.
    no({ ...move, server: { ...server, check: true } } as Operation);
    no({ kind: 'create_backend', backend: { name: 'x', balance: 'leastconn' } });
  });

  it('counts the Data Plane API requests a plan takes at runtime', () => {
    // A new route: add server, ready, map entry; a move: maintenance, delete, add, ready.
    expect(runtimeRequests(runtimeSteps(plan(...add, move), reading) ?? [])).toBe(7);
  });
});

describe('the Data Plane API path of a plan (choosePath)', () => {
  const facts = { runtimeServers: true, busy: new Set<string>(), maxRuntimeRequests: undefined };
  it('runtime for servers and entries, a reload for structure and on HAProxy 2.6', () => {
    expect(choosePath(plan(...add), reading, facts).kind).toBe('runtime');
    expect(choosePath(plan(...add), reading, { ...facts, runtimeServers: undefined }).kind).toBe('runtime');
    expect(choosePath(plan(...add), reading, { ...facts, runtimeServers: false }).kind).toBe('reload');
    expect(
      choosePath(
        plan({ kind: 'create_backend', backend: { name: 'x', balance: 'leastconn' } }),
        reading,
        facts,
      ).kind,
    ).toBe('reload');
  });

  it('moves in place the servers found carrying a stream; a plan mixing them with more reloads', () => {
    const busy = { ...facts, busy: new Set(['kubebyon_slot_00001/srv1']) };
    expect(choosePath(plan(move), reading, busy)).toEqual({ kind: 'moves', moves: [move] });
    expect(choosePath(plan(move, ...add), reading, busy).kind).toBe('reload');
  });

  it('a burst past the runtime budget (slots in the storage) is one write of the files and one reload', () => {
    expect(choosePath(plan(...add), reading, { ...facts, maxRuntimeRequests: 3 }).kind).toBe('runtime');
    expect(choosePath(plan(...add, move), reading, { ...facts, maxRuntimeRequests: 3 }).kind).toBe('reload');
  });
});
