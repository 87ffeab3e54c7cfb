import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { serverSlotName, serverSlotNumber } from '../../src/naming/names.js';
import { legacyBackendName as backendNameFor } from '../support/legacy-rules.js';
import { PROPERTY_TIMEOUT_MS } from '../support/property.js';

describe('the per-cluster backend names of installs before map routing (upgrade fixtures)', () => {
  it('is readable, prefixed and stable', () => {
    expect(backendNameFor('demo')).toMatch(/^kubebyon_demo_[0-9a-f]{12}$/);
    expect(backendNameFor('demo')).toBe(backendNameFor('demo'));
    expect(backendNameFor('demo', 'edge_')).toMatch(/^edge_demo_/);
  });

  it('keeps names that slug alike apart', () => {
    expect(backendNameFor('Demo')).not.toBe(backendNameFor('demo'));
    expect(backendNameFor('a.b')).not.toBe(backendNameFor('a-b'));
    expect(backendNameFor(`${'x'.repeat(40)}1`)).not.toBe(backendNameFor(`${'x'.repeat(40)}2`));
  });

  it('stays within HAProxy name characters and length for any input, and is injective on samples', {
    timeout: PROPERTY_TIMEOUT_MS,
  }, () => {
    fc.assert(
      fc.property(
        fc.uniqueArray(fc.string({ unit: 'grapheme', maxLength: 300 }), { minLength: 2, maxLength: 50 }),
        (ids) => {
          const names = ids.map((id) => backendNameFor(id));
          for (const n of names) {
            expect(n).toMatch(/^[a-z0-9_-]+$/);
            expect(n.length).toBeLessThanOrEqual('kubebyon_'.length + 45);
          }
          expect(new Set(names).size).toBe(ids.length);
        },
      ),
    );
  });
});

describe('server slots', () => {
  it('round-trips slot numbers and refuses other names', () => {
    expect(serverSlotNumber(serverSlotName(7))).toBe(7);
    expect(serverSlotNumber('srv0')).toBeUndefined();
    expect(serverSlotNumber('web1')).toBeUndefined();
  });
});
