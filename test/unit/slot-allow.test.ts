import { BlockList } from 'node:net';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { allowKeys } from '../../src/haproxy/allow-keys.js';
import {
  keysOfSlotMap,
  OPEN_NETWORKS,
  slotAllowMapName,
  slotMapOps,
  slotMapText,
  slotNetworks,
} from '../../src/haproxy/slot-allow.js';
import { keysBySlot, planSlotAllow } from '../../src/plan/allow.js';
import type { Operation } from '../../src/plan/operations.js';
import { sortOperations } from '../../src/plan/plan.js';

const MAP = 'kubebyon.allow.map';
const SLOTS = ['kb_slot_00001', 'kb_slot_00002'];
const NETS = ['0.0.0.0/0', '::/0', '198.18.0.0/24', '198.18.0.1/32', '2001:db8::/32', '127.0.0.1/32'];

const route = (networks: string[]) => ({ host: 'api.example.com', cluster: 'c', servers: [], networks });

/** HAProxy's map as the runtime API treats it: `add map` adds an entry (twice: two), `del map` drops them all. */
class RuntimeMap {
  readonly counts = new Map<string, number>();
  constructor(networks: readonly string[]) {
    for (const n of networks) this.counts.set(n, (this.counts.get(n) ?? 0) + 1);
  }
  add(n: string) {
    this.counts.set(n, (this.counts.get(n) ?? 0) + 1);
  }
  del(n: string) {
    this.counts.delete(n);
  }
  get networks(): Set<string> {
    return new Set(this.counts.keys());
  }
}

/** Sources (addresses only, never dialled) inside and outside the networks above. */
const PROBES = [
  '198.18.0.1',
  '198.18.0.200',
  '127.0.0.1',
  '203.0.113.5',
  '2001:db8::1',
  '2001:db9::1',
  '::1',
];

/** Whether a map holding `networks` lets a source in, judged per family as a socket of that family sees it. */
function admits(networks: Iterable<string>): (source: string) => boolean {
  const list = new BlockList();
  for (const n of networks) {
    const [address, prefix] = n.split('/') as [string, string];
    list.addSubnet(address, Number(prefix), address.includes(':') ? 'ipv6' : 'ipv4');
  }
  return (source) => list.check(source, source.includes(':') ? 'ipv6' : 'ipv4');
}

describe("the slots' allow maps", () => {
  it('names a map per slot beside the logical allow map', () => {
    expect(slotAllowMapName(MAP, 'kb_slot_00007')).toBe('kubebyon.allow.kb_slot_00007.map');
  });

  it('holds the open networks for a slot without a flag, and a restricted slot its networks', () => {
    expect(slotNetworks('s', undefined)).toEqual(OPEN_NETWORKS);
    expect(slotNetworks('s', new Set(['198.18.0.0/24|s']))).toEqual(OPEN_NETWORKS);
    expect(slotNetworks('s', new Set(['s', '198.18.0.0/24|s', '::1/128|s']))).toEqual([
      '198.18.0.0/24',
      '::1/128',
    ]);
    expect(slotMapText('s', new Set(['s', '198.18.0.0/24|s']))).toBe('198.18.0.0/24 1\n');
  });

  it('refuses to write a key that is not an allow key, or another slot’s', () => {
    expect(() => slotMapText('s', new Set(['s', '198.18.0.0/24 1|s']))).toThrow(/refusing/);
    expect(() => slotMapText('s', new Set(['t']))).toThrow(/refusing/);
  });

  it('reads a map back to the logical keys it stands for; a foreign entry reads as undefined', () => {
    const open = new Map(OPEN_NETWORKS.map((n) => [n, '1']));
    expect(keysOfSlotMap('s', open)).toEqual([]);
    expect(keysOfSlotMap('s', new Map([['198.18.0.0/24', '1']]))).toEqual(['s', '198.18.0.0/24|s']);
    expect(keysOfSlotMap('s', new Map([['198.18.0.0/24', '2']]))).toBeUndefined();
    expect(keysOfSlotMap('s', new Map([['not a network', '1']]))).toBeUndefined();
  });

  it('changes lists step by step: no source gets in that neither list allows, none both allow is shut out', () => {
    const list = fc.option(fc.uniqueArray(fc.constantFrom(...NETS), { maxLength: 5 }), { nil: undefined });
    fc.assert(
      fc.property(fc.tuple(list, list), fc.tuple(list, list), fc.boolean(), (from, to, dualStack) => {
        // Each slot: undefined is a slot no route holds; [] an open route; else a restricted one.
        const current = new Map<string, string>();
        SLOTS.forEach((slot, i) => {
          const nets = from[i];
          if (nets) for (const k of allowKeys(slot, nets, dualStack)) current.set(k, '1');
        });
        const bySlot = keysBySlot(current);
        const ops: Operation[] = [];
        SLOTS.forEach((slot, i) => {
          const nets = to[i];
          planSlotAllow({ map: MAP, dualStack, current: bySlot }, slot, nets ? route(nets) : undefined, ops);
        });
        const logical = sortOperations(ops).filter(
          (o): o is Extract<Operation, { kind: 'add_allow_entry' | 'delete_allow_entry' }> =>
            o.kind === 'add_allow_entry' || o.kind === 'delete_allow_entry',
        );
        const physical = slotMapOps(MAP, logical, (slot) => bySlot.get(slot));
        const maps = new Map(SLOTS.map((s) => [s, new RuntimeMap(slotNetworks(s, bySlot.get(s)))]));
        const target = keysBySlot(
          new Map(
            SLOTS.flatMap((slot, i) => {
              const nets = to[i];
              return nets ? allowKeys(slot, nets, dualStack).map((k) => [k, '1'] as const) : [];
            }),
          ),
        );
        for (const op of physical) {
          const m = maps.get(op.slot) as RuntimeMap;
          expect(op.map).toBe(slotAllowMapName(MAP, op.slot));
          if (op.kind === 'add') {
            // Never a second entry of a network: `del map` would drop both.
            expect(m.counts.has(op.network)).toBe(false);
            m.add(op.network);
          } else m.del(op.network);
          for (const slot of SLOTS) {
            const old = admits(slotNetworks(slot, bySlot.get(slot)));
            const next = admits(slotNetworks(slot, target.get(slot)));
            const now = admits((maps.get(slot) as RuntimeMap).networks);
            for (const p of PROBES) {
              // Never a client that neither list lets in (a restricted slot never opens to everyone).
              if (now(p)) expect(old(p) || next(p)).toBe(true);
              // A slot that a route holds before and after never shuts out a client both lists let in.
              if (from[SLOTS.indexOf(slot)] && to[SLOTS.indexOf(slot)] && old(p) && next(p))
                expect(now(p)).toBe(true);
            }
          }
        }
        for (const slot of SLOTS)
          expect((maps.get(slot) as RuntimeMap).networks).toEqual(
            new Set(slotNetworks(slot, target.get(slot))),
          );
      }),
      { numRuns: 400 },
    );
  });
});
