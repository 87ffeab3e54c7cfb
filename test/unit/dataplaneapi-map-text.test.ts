import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { CowMap } from '../../src/haproxy/cow-map.js';
import { MapText } from '../../src/providers/dataplaneapi/maps.js';

/** What the SNI map file must say for `entries`, written plainly: `host backend` lines, hosts sorted. */
function expected(entries: ReadonlyMap<string, string>): string {
  return [...entries.keys()]
    .sort()
    .map((host) => `${host} ${entries.get(host)}\n`)
    .join('');
}

const HOSTS = Array.from({ length: 40 }, (_, i) => `c${String(i).padStart(2, '0')}.zr.example.com`);
const BACKENDS = ['kb_slot_00001', 'kb_slot_00002', 'kb_slot_00003'];

describe('the SNI map file text, kept between writes', () => {
  it('reads as the plain rendering after any sequence of adds, moves and deletes, small or large', () => {
    // A long run of edits also folds the overlay into a new base (CowMap), which shares nothing told.
    const change = fc.record({
      host: fc.constantFrom(...HOSTS),
      backend: fc.option(fc.constantFrom(...BACKENDS), { nil: undefined }),
    });
    // Up to 80 changes per step: past the 64 keys added in place, the kept order is sorted again.
    fc.assert(
      fc.property(
        fc.array(fc.tuple(fc.array(change, { maxLength: 80 }), fc.boolean()), { maxLength: 30 }),
        (steps) => {
          const text = new MapText();
          let entries: ReadonlyMap<string, string> = new Map();
          expect(text.text(entries)).toBe('');
          // Each step a copy (every entry compared) or an edit of the last map (the changed keys told).
          for (const [changes, edit] of steps) {
            const next = edit ? CowMap.edit(entries) : new Map(entries);
            for (const c of changes) c.backend ? next.set(c.host, c.backend) : next.delete(c.host);
            expect(text.text(next)).toBe(expected(next));
            entries = next;
          }
        },
      ),
      { numRuns: 200, seed: 20261205 },
    );
  });

  it('refuses an entry that must not reach HAProxy, and the next text is right all the same', () => {
    const text = new MapText();
    const good = new Map([
      ['b.example.com', 'kb_slot_00002'],
      ['a.example.com', 'kb_slot_00001'],
    ]);
    expect(text.text(good)).toBe('a.example.com kb_slot_00001\nb.example.com kb_slot_00002\n');
    const bad = new Map([...good, ['c.example.com\nbackend x', 'kb_slot_00003']]);
    expect(() => text.text(bad)).toThrow();
    const worse = new Map([...good, ['c.example.com', 'kb slot']]);
    expect(() => text.text(worse)).toThrow();
    const next = new Map([...good, ['c.example.com', 'kb_slot_00003']]);
    expect(text.text(next)).toBe(expected(next));
    expect(new MapText().text(next)).toBe(expected(next));
  });
});
