import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { SlotAllowIndex } from '../../src/haproxy/allow-file.js';
import { CowMap } from '../../src/haproxy/cow-map.js';
import { slotMapSteps, slotMapText } from '../../src/haproxy/slot-allow.js';
import { PROPERTY_TIMEOUT_MS } from '../support/property.js';

/** The error the index is told to refuse with: a class of its own, so that a test sees it is the one thrown. */
class Refused extends Error {}
const refuse = (detail: string) => new Refused(detail);

const MAP = 'o.allow.map';
const SLOTS = ['kb_slot_00001', 'kb_slot_00002', 'kb_slot_00003'];
const NETS = [
  '198.18.0.1/32',
  '198.18.0.0/24',
  '2001:db8::/32',
  '127.0.0.1/32',
  '::ffff:198.18.0.0/120',
  '::/96',
];
const KEYS = SLOTS.flatMap((s) => [s, ...NETS.map((n) => `${n}|${s}`)]);

type LogicalOp = { kind: 'add_allow_entry' | 'delete_allow_entry'; key: string };

/** The keys of each slot in `entries`, grouped plainly (a flag is its slot's name; a network key ends `|slot`). */
function grouped(entries: ReadonlyMap<string, string>): Map<string, Set<string>> {
  const out = new Map<string, Set<string>>();
  for (const key of entries.keys()) {
    const slot = key.includes('|') ? key.slice(key.lastIndexOf('|') + 1) : key;
    out.set(slot, new Set([...(out.get(slot) ?? []), key]));
  }
  return out;
}

/** A copy of what the index says of `slot` now (its sets are its own, and change as it follows). */
const keysNow = (index: SlotAllowIndex, slot: string) => {
  const keys = index.keysOf(slot);
  return keys === undefined ? undefined : new Set(keys);
};

/** The index agrees with a plain grouping of `entries`, and with a fresh index built from them. */
function expectFollows(index: SlotAllowIndex, entries: ReadonlyMap<string, string>): void {
  const plain = grouped(entries);
  const fresh = new SlotAllowIndex(refuse);
  fresh.follow(new Map(entries));
  for (const slot of SLOTS) {
    expect(keysNow(index, slot), slot).toEqual(plain.get(slot));
    expect(keysNow(index, slot), slot).toEqual(keysNow(fresh, slot));
    expect(index.text(slot)).toBe(slotMapText(slot, plain.get(slot)));
    expect(index.text(slot)).toBe(fresh.text(slot));
  }
}

const changeArb = fc.record({ key: fc.constantFrom(...KEYS), add: fc.boolean() });

describe('the slots’ allow maps, indexed by slot', () => {
  it('follows any sequence of list changes, told or not told what changed, as a fresh index would', {
    timeout: PROPERTY_TIMEOUT_MS,
  }, () => {
    fc.assert(
      fc.property(
        fc.array(fc.tuple(fc.array(changeArb, { maxLength: 6 }), fc.boolean(), fc.boolean()), {
          maxLength: 12,
        }),
        (steps) => {
          const index = new SlotAllowIndex(refuse);
          let entries: ReadonlyMap<string, string> = new Map();
          index.follow(entries);
          expectFollows(index, entries);
          for (const [changes, told, askFirst] of steps) {
            const next = CowMap.edit(entries);
            for (const c of changes) c.add ? next.set(c.key, '1') : next.delete(c.key);
            // Asked for a text before the change: the index must not keep it once the slot changes.
            if (askFirst) for (const slot of SLOTS) index.text(slot);
            const since = told ? { from: entries, keys: changes.map((c) => c.key) } : undefined;
            index.follow(next, since);
            expectFollows(index, next);
            entries = next;
          }
        },
      ),
      { numRuns: 200, seed: 20261205 },
    );
  });

  it('makes the runtime changes of logical operations from the keys it followed, and stays where it was', {
    timeout: PROPERTY_TIMEOUT_MS,
  }, () => {
    const opArb = fc.record({
      kind: fc.constantFrom('add_allow_entry' as const, 'delete_allow_entry' as const),
      key: fc.constantFrom(...KEYS),
    });
    fc.assert(
      fc.property(
        fc.array(fc.tuple(fc.array(changeArb, { maxLength: 6 }), fc.array(opArb, { maxLength: 6 })), {
          maxLength: 8,
        }),
        (steps) => {
          const index = new SlotAllowIndex(refuse);
          let entries: ReadonlyMap<string, string> = new Map();
          index.follow(entries);
          for (const [changes, ops] of steps) {
            const next = CowMap.edit(entries);
            for (const c of changes) c.add ? next.set(c.key, '1') : next.delete(c.key);
            index.follow(next, { from: entries, keys: changes.map((c) => c.key) });
            entries = next;
            const plain = grouped(entries);
            expect(index.runtimeSteps(MAP, ops)).toEqual(slotMapSteps(MAP, ops, (slot) => plain.get(slot)));
            // Not moved on: the caller follows the target once the commands ran.
            expectFollows(index, entries);
          }
        },
      ),
      { numRuns: 150, seed: 20261206 },
    );
  });

  it('groups all again when the entries it is told it came from are not the ones it followed last', () => {
    const index = new SlotAllowIndex(refuse);
    const s = SLOTS[0] as string;
    index.follow(new Map([[`198.18.0.1/32|${s}`, '1']]));
    // b differs from what it followed by a key the caller does not mention; c is b plus one it does mention.
    const b = new Map([[`198.18.0.0/24|${s}`, '1']]);
    const c = new Map([...b, [s, '1']]);
    index.follow(c, { from: b, keys: [s] });
    expectFollows(index, c);
    expect(index.text(s)).toBe('198.18.0.0/24 1\n::/96 0\n::ffff:0.0.0.0/96 0\n');
  });

  it('groups all again when the keys it is told do not account for every entry', () => {
    const index = new SlotAllowIndex(refuse);
    const [s0, s1] = SLOTS as [string, string];
    const a: ReadonlyMap<string, string> = new Map([[s0, '1']]);
    index.follow(a);
    const b = CowMap.edit(a);
    b.set(`198.18.0.1/32|${s0}`, '1');
    b.set(s1, '1');
    b.set(`198.18.0.0/24|${s1}`, '1');
    index.follow(b, { from: a, keys: [`198.18.0.1/32|${s0}`] });
    expectFollows(index, b);
    expect(index.keysOf(s1)).toEqual(new Set([s1, `198.18.0.0/24|${s1}`]));
  });

  it('gives an open map for a slot it holds no keys of, or only network keys of', () => {
    const index = new SlotAllowIndex(refuse);
    const s = SLOTS[0] as string;
    expect(index.text(s)).toBe('0.0.0.0/0 1\n::/0 1\n');
    index.follow(new Map([[`198.18.0.0/24|${s}`, '1']]));
    expect(index.text(s)).toBe('0.0.0.0/0 1\n::/0 1\n');
    expect(index.keysOf(SLOTS[1] as string)).toBeUndefined();
  });

  it('holds a key that is not an allow key (a hand edit, for the planner to delete), but never writes it', () => {
    const index = new SlotAllowIndex(refuse);
    const [s0, s1] = SLOTS as [string, string];
    const good: ReadonlyMap<string, string> = new Map([
      [s0, '1'],
      [`198.18.0.0/24|${s0}`, '1'],
      [s1, '1'],
    ]);
    index.follow(good);
    for (const key of [
      `198.18.0.1/32\nadd map x y|${s0}`,
      `198.18.0.5/24|${s0}`,
      `198.18.0.0/15 1|${s0}`,
      `2001:DB8::/32|${s0}`,
    ]) {
      const bad = CowMap.edit(good);
      bad.set(key, '1');
      index.follow(bad, { from: good, keys: [key] });
      expect(index.keysOf(s0)?.has(key)).toBe(true);
      expect(() => index.text(s0)).toThrow(Refused);
      expect(() => index.text(s0)).toThrow(/refusing to write allow key/);
      // Another slot is written as ever.
      expect(index.text(s1)).toBe(slotMapText(s1, new Set([s1])));
      // Its deletion is a runtime change the index makes; the network named as the map holds it.
      const steps = index.runtimeSteps(MAP, [{ kind: 'delete_allow_entry', key }]);
      expect(steps.flat()).toEqual([
        expect.objectContaining({ kind: 'delete', slot: s0, network: key.slice(0, key.lastIndexOf('|')) }),
      ]);
      index.follow(good, { from: bad, keys: [key] });
      expect(index.text(s0)).toBe(slotMapText(s0, grouped(good).get(s0)));
    }
  });

  it('refuses to send HAProxy a network that is not one it writes', () => {
    const index = new SlotAllowIndex(refuse);
    const s = SLOTS[0] as string;
    index.follow(new Map([[s, '1']]));
    for (const key of [`198.18.0.5/24|${s}`, `198.18.0.0/24 1|${s}`, `10.0.0.0/8\nclear map x|${s}`]) {
      const ops: LogicalOp[] = [{ kind: 'add_allow_entry', key }];
      expect(() => index.runtimeSteps(MAP, ops)).toThrow(Refused);
      expect(() => index.runtimeSteps(MAP, ops)).toThrow(/refusing to send allow-map network/);
    }
    // The networks it writes, and the refusals, go through.
    const ok = index.runtimeSteps(MAP, [
      { kind: 'add_allow_entry', key: `198.18.0.0/24|${s}` },
      { kind: 'add_allow_entry', key: `::ffff:198.18.0.0/120|${s}` },
      { kind: 'delete_allow_entry', key: s },
      { kind: 'add_allow_entry', key: s },
    ]);
    expect(ok.flat().filter((op) => op.kind === 'add')).toHaveLength(2 + 2 + 4);
  });
});
