import { describe, expect, it } from 'vitest';
import type { Conflict } from '../../src/plan/plan.js';
import { sortConflicts } from '../../src/reconcile/conflicts.js';

const conflict = (kind: Conflict['kind'], name: string): Conflict => ({
  kind,
  name,
  detail: `${kind} ${name}`,
});

describe('sortConflicts', () => {
  it('keeps a missing default backend apart: it stops no route', () => {
    const sorted = sortConflicts([conflict('default_backend_missing', 'console')]);
    expect(sorted.blocking).toBeUndefined();
    expect(sorted.others).toEqual([conflict('default_backend_missing', 'console')]);
  });

  it('names a foreign frontend as blocking every route', () => {
    const sorted = sortConflicts([
      conflict('default_backend_missing', 'console'),
      conflict('frontend_not_owned', 'kubebyon_sni'),
    ]);
    expect(sorted.blocking).toEqual(conflict('frontend_not_owned', 'kubebyon_sni'));
    expect(sorted.others).toEqual([conflict('default_backend_missing', 'console')]);
  });
});
