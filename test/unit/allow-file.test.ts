import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { AllowFileText } from '../../src/haproxy/allow-file.js';
import { CowMap } from '../../src/haproxy/cow-map.js';

const refuse = (detail: string) => new RangeError(detail);

/** What the file must say for `entries`, written plainly: slots in order, flag first, networks sorted. */
function expected(entries: ReadonlyMap<string, string>): string {
  const slots = new Map<string, string[]>();
  for (const key of entries.keys()) {
    const slot = key.includes('|') ? key.slice(key.indexOf('|') + 1) : key;
    slots.set(slot, [...(slots.get(slot) ?? []), key]);
  }
  return [...slots.keys()]
    .sort()
    .map((slot) => {
      const keys = slots.get(slot) as string[];
      const nets = keys.filter((k) => k !== slot).sort();
      return (keys.includes(slot) ? [slot, ...nets] : nets).map((k) => `${k} 1\n`).join('');
    })
    .join('');
}

const SLOTS = ['kb_slot_00001', 'kb_slot_00002', 'kb_slot_00003'];
const NETS = ['198.18.0.1/32', '198.18.0.0/24', '2001:db8::/32', '127.0.0.1/32', '::ffff:198.18.0.0/120'];
const KEYS = SLOTS.flatMap((s) => [s, ...NETS.map((n) => `${n}|${s}`)]);

describe('the allow map file text, rendered again per slot', () => {
  it('reads as the plain rendering after any sequence of list changes, told or not told what changed', () => {
    const step = fc.array(fc.record({ key: fc.constantFrom(...KEYS), add: fc.boolean() }), {
      maxLength: 6,
    });
    fc.assert(
      fc.property(fc.array(fc.tuple(step, fc.boolean()), { maxLength: 12 }), (steps) => {
        const text = new AllowFileText(refuse);
        let entries: ReadonlyMap<string, string> = new Map();
        expect(text.text(entries)).toBe('');
        for (const [changes, told] of steps) {
          const next = CowMap.edit(entries);
          for (const c of changes) c.add ? next.set(c.key, '1') : next.delete(c.key);
          const since = told ? { from: entries, keys: changes.map((c) => c.key) } : undefined;
          expect(text.text(next, since)).toBe(expected(next));
          entries = next;
        }
      }),
      { numRuns: 300, seed: 20261205 },
    );
  });

  it('gives the same text as buffers, whichever of the two each change asks for', () => {
    const step = fc.array(fc.record({ key: fc.constantFrom(...KEYS), add: fc.boolean() }), {
      maxLength: 6,
    });
    fc.assert(
      fc.property(fc.array(fc.tuple(step, fc.boolean(), fc.boolean()), { maxLength: 12 }), (steps) => {
        const text = new AllowFileText(refuse);
        let entries: ReadonlyMap<string, string> = new Map();
        for (const [changes, told, asChunks] of steps) {
          const next = CowMap.edit(entries);
          for (const c of changes) c.add ? next.set(c.key, '1') : next.delete(c.key);
          const since = told ? { from: entries, keys: changes.map((c) => c.key) } : undefined;
          const got = asChunks
            ? Buffer.concat(text.chunks(next, since)).toString('utf8')
            : text.text(next, since);
          expect(got).toBe(expected(next));
          entries = next;
        }
        expect(Buffer.concat(text.chunks(entries)).toString('utf8')).toBe(text.text(entries));
      }),
      { numRuns: 300, seed: 20261206 },
    );
  });

  it('hands out a buffer per 64 slots; after any changes, told or not, they read as the plain rendering', () => {
    // 150 slots: three blocks, so that a change in one block must leave the others' buffers as they were.
    const many = Array.from({ length: 150 }, (_, i) => `kb_slot_${String(i + 1).padStart(5, '0')}`);
    const key = fc
      .tuple(fc.constantFrom(...many), fc.constantFrom('', ...NETS))
      .map(([slot, net]) => (net === '' ? slot : `${net}|${slot}`));
    const start = new Map(
      many.flatMap((slot) => [[slot, '1'] as const, [`${NETS[0]}|${slot}`, '1'] as const]),
    );
    fc.assert(
      fc.property(
        fc.array(fc.tuple(fc.array(fc.record({ key, add: fc.boolean() }), { maxLength: 8 }), fc.boolean()), {
          maxLength: 10,
        }),
        (steps) => {
          const text = new AllowFileText(refuse);
          let entries: ReadonlyMap<string, string> = start;
          expect(text.chunks(entries)).toHaveLength(3);
          for (const [changes, told] of steps) {
            const next = CowMap.edit(entries);
            for (const c of changes) c.add ? next.set(c.key, '1') : next.delete(c.key);
            const since = told ? { from: entries, keys: changes.map((c) => c.key) } : undefined;
            const chunks = text.chunks(next, since);
            const slots = new Set([...next.keys()].map((k) => k.slice(k.indexOf('|') + 1)));
            expect(chunks).toHaveLength(Math.ceil(slots.size / 64));
            expect(Buffer.concat(chunks).toString('utf8')).toBe(expected(next));
            entries = next;
          }
        },
      ),
      { numRuns: 200, seed: 20261207 },
    );
  });

  it('renders all again when the entries it is told it came from are not the ones it rendered last', () => {
    const text = new AllowFileText(refuse);
    const a = new Map([[`198.18.0.1/32|${SLOTS[0]}`, '1']]);
    text.text(a);
    // b differs from a by one key the caller does not mention; c is b plus one key it does mention.
    const b = new Map([[`198.18.0.2/32|${SLOTS[0]}`, '1']]);
    const c = new Map([...b, [SLOTS[0] as string, '1']]);
    expect(text.text(c, { from: b, keys: [SLOTS[0] as string] })).toBe(expected(c));
  });

  it('renders all again when the keys it is told do not account for every entry', () => {
    const text = new AllowFileText(refuse);
    const a: ReadonlyMap<string, string> = new Map([[SLOTS[0] as string, '1']]);
    text.text(a);
    const b = CowMap.edit(a);
    b.set(`198.18.0.1/32|${SLOTS[0]}`, '1');
    b.set(`198.18.0.2/32|${SLOTS[1]}`, '1');
    expect(text.text(b, { from: a, keys: [`198.18.0.1/32|${SLOTS[0]}`] })).toBe(expected(b));
  });

  it('refuses a key or value that must not reach HAProxy, and renders all on the next call', () => {
    const text = new AllowFileText(refuse);
    const good: ReadonlyMap<string, string> = new Map([[SLOTS[0] as string, '1']]);
    text.text(good);
    for (const [key, value] of [
      ['198.18.0.1/32|slot\nadd map x y', '1'],
      ['198.18.0.5/24|kb_slot_00001', '1'],
      ['198.18.0.0/15 1|kb_slot_00001', '1'],
      [SLOTS[1] as string, '0'],
    ] as const) {
      const bad = CowMap.edit(good);
      bad.set(key, value);
      expect(() => text.text(bad, { from: good, keys: [key] })).toThrow(RangeError);
      expect(() => text.text(bad)).toThrow(/refusing to write allow-map entry/);
    }
    expect(text.text(good)).toBe(expected(good));
  });
});
