import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { CowMap } from '../../src/haproxy/cow-map.js';
import type { HaproxyState } from '../../src/haproxy/model.js';
import { applyOperations } from '../../src/plan/apply.js';
import type { Operation } from '../../src/plan/operations.js';
import { Registry } from '../../src/registry/registry.js';

// Enough keys that an overlay outgrows its limit (32 at least) and is folded into a new base.
const KEYS = Array.from({ length: 80 }, (_, i) => `k${i}`);
const keyArb = fc.constantFrom(...KEYS);
const opArb = fc.oneof(
  {
    arbitrary: fc.record({
      kind: fc.constant('set' as const),
      key: keyArb,
      value: fc.constantFrom('a', 'b', 'c', 'd'),
    }),
    weight: 2,
  },
  { arbitrary: fc.record({ kind: fc.constant('delete' as const), key: keyArb }), weight: 1 },
);
/** Each step edits one earlier version (mostly the latest, as states go) with a few operations. */
const stepArb = fc.record({
  from: fc.oneof(fc.constant(-1), fc.nat()),
  ops: fc.array(opArb, { maxLength: 6 }),
});
const baseArb = fc.uniqueArray(fc.tuple(keyArb, fc.constantFrom('x', 'y')), {
  selector: ([k]) => k,
  maxLength: 40,
  size: 'max',
});

/**
 * Everything a reader can see of a map, in its order, as one string: compared as strings, the property's
 * cost is the maps' own work (a deep `toEqual` per step made it 6-9 s on a slow machine).
 */
function seen(m: ReadonlyMap<string, string>): string {
  const each: Array<[string, string]> = [];
  m.forEach((v, k) => {
    each.push([k, v]);
  });
  return JSON.stringify({
    size: m.size,
    entries: [...m],
    entriesCall: [...m.entries()],
    keys: [...m.keys()],
    values: [...m.values()],
    each,
    gets: [...KEYS, 'absent'].map((k) => [m.get(k) ?? null, m.has(k)]),
  });
}

describe('CowMap', () => {
  // 200 runs of up to 120 steps: about 1 s on an idle 2-core machine; the timeout leaves room for a slow one.
  it('reads as a plain Map with the same operations would, every version, old ones included', {
    timeout: 120_000,
  }, () => {
    fc.assert(
      fc.property(baseArb, fc.array(stepArb, { maxLength: 120, size: 'max' }), (base, steps) => {
        const versions: Array<{ cow: ReadonlyMap<string, string>; plain: Map<string, string> }> = [
          { cow: new Map(base), plain: new Map(base) },
        ];
        for (const step of steps) {
          const parent = versions[step.from < 0 ? versions.length - 1 : step.from % versions.length];
          if (!parent) throw new Error('no parent');
          const cow = CowMap.edit(parent.cow);
          const plain = new Map(parent.plain);
          for (const op of step.ops) {
            if (op.kind === 'set') {
              expect(cow.set(op.key, op.value)).toBe(cow);
              plain.set(op.key, op.value);
            } else expect(cow.delete(op.key)).toBe(plain.delete(op.key));
          }
          versions.push({ cow, plain });
          expect(seen(cow)).toBe(seen(plain));
        }
        // Editing a version never changed one made before.
        for (const v of versions) expect(seen(v.cow)).toBe(seen(v.plain));
      }),
      { numRuns: 200, seed: 20261204, endOnFailure: true },
    );
  });

  it('starts empty without a map to start from', () => {
    const empty = CowMap.edit<string, string>();
    expect(seen(empty)).toEqual(seen(new Map()));
  });
});

/** A map that counts the entries read off it whole (iteration), as a copy of it reads them. */
class CountingMap extends Map<string, string> {
  iterated = 0;
  override *entries(): MapIterator<[string, string]> {
    for (const e of super.entries()) {
      this.iterated++;
      yield e;
    }
  }
  override [Symbol.iterator]() {
    return this.entries();
  }
  override *keys(): MapIterator<string> {
    for (const [k] of this.entries()) yield k;
  }
  override *values(): MapIterator<string> {
    for (const [, v] of this.entries()) yield v;
  }
}

describe('applyOperations on a large SNI map', () => {
  it('changes one entry per plan without reading the others, and leaves every earlier state as it was', () => {
    const registry = new Registry();
    const n = 5_000;
    const base = new CountingMap(Array.from({ length: n }, (_, i) => [`h${i}.example.com`, `slot${i}`]));
    base.iterated = 0;
    const states: HaproxyState[] = [{ frontends: [], backends: [], maps: [{ name: 'sni', entries: base }] }];
    for (let i = 0; i < 20; i++) {
      const host = `h${i}.example.com`;
      const op: Operation =
        i % 2 === 0
          ? { kind: 'delete_map_entry', map: 'sni', host, backend: `slot${i}` }
          : { kind: 'set_map_entry', map: 'sni', host, backend: 'slotX', previous: `slot${i}`, cluster: 'c' };
      states.push(applyOperations(states.at(-1) as HaproxyState, [op], registry).state);
    }
    expect(base.iterated).toBe(0);
    const last = states.at(-1)?.maps?.[0]?.entries;
    expect(last?.size).toBe(n - 10);
    expect(last?.get('h1.example.com')).toBe('slotX');
    expect(last?.has('h0.example.com')).toBe(false);
    expect(states[1]?.maps?.[0]?.entries.get('h1.example.com')).toBe('slot1');
    expect(states[0]?.maps?.[0]?.entries.size).toBe(n);
  });

  it('folds a bulk change into a new base in that change: the next one reads nothing whole and diffs by its own keys', () => {
    const registry = new Registry();
    const base = new CountingMap(Array.from({ length: 5_000 }, (_, i) => [`h${i}.example.com`, `slot${i}`]));
    const start: HaproxyState = { frontends: [], backends: [], maps: [{ name: 'sni', entries: base }] };
    // 2000 entries at once: far more than the overlay's limit (100 at 5000).
    const bulk: Operation[] = Array.from({ length: 2_000 }, (_, i) => ({
      kind: 'set_map_entry',
      map: 'sni',
      host: `new${i}.example.com`,
      backend: `slot${i}`,
      previous: null,
      cluster: `c${i}`,
    }));
    const afterBulk = applyOperations(start, bulk, registry).state;
    const bulkMap = afterBulk.maps?.[0]?.entries as ReadonlyMap<string, string>;
    expect(bulkMap.size).toBe(7_000);
    const folded = base.iterated;
    expect(folded).toBe(5_000); // read once, by the bulk change's own fold
    const one: Operation = { kind: 'delete_map_entry', map: 'sni', host: 'h7.example.com', backend: 'slot7' };
    const next = applyOperations(afterBulk, [one], registry).state.maps?.[0]?.entries as ReadonlyMap<
      string,
      string
    >;
    expect(base.iterated).toBe(folded);
    expect(CowMap.changedKeys(bulkMap, next)).toEqual(new Set(['h7.example.com']));
    expect([next.size, next.has('h7.example.com'), next.get('new1999.example.com')]).toEqual([
      6_999,
      false,
      'slot1999',
    ]);
  });
});
