import { describe, expect, it } from 'vitest';
import type { Conflict } from '../../src/plan/plan.js';
import { sortConflicts } from '../../src/reconcile/conflicts.js';

const backends = [
  { name: 'kubebyon_a_1', cluster: 'a' },
  { name: 'kubebyon_b_2', cluster: 'b' },
];
const conflict = (kind: Conflict['kind'], name: string): Conflict => ({
  kind,
  name,
  detail: `${kind} ${name}`,
});

describe('sortConflicts', () => {
  it('puts a conflict on a cluster’s backend under that cluster, and the rest apart', () => {
    const sorted = sortConflicts(
      [conflict('backend_not_owned', 'kubebyon_b_2'), conflict('default_backend_missing', 'console')],
      backends,
    );
    expect(sorted.blocking).toBeUndefined();
    expect([...sorted.byCluster]).toEqual([['b', 'backend_not_owned kubebyon_b_2']]);
    expect(sorted.others).toEqual([conflict('default_backend_missing', 'console')]);
  });

  it('names a foreign frontend as blocking every route', () => {
    const sorted = sortConflicts([conflict('frontend_not_owned', 'kubebyon_sni')], backends);
    expect(sorted.blocking).toEqual(conflict('frontend_not_owned', 'kubebyon_sni'));
    expect(sorted.byCluster.size).toBe(0);
    expect(sorted.others).toEqual([]);
  });
});
