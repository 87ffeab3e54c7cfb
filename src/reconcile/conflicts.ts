import type { Conflict } from '../plan/plan.js';

export interface SortedConflicts {
  /** A foreign frontend under the service's name: it blocks every route, nothing may be applied. */
  blocking: Conflict | undefined;
  /** Conflicts that stop no route (a missing default backend): for the log. */
  others: Conflict[];
}

/** A plan's conflicts, told apart by whom they stop: every route, or nobody in particular. Pure. */
export function sortConflicts(conflicts: readonly Conflict[]): SortedConflicts {
  const sorted: SortedConflicts = { blocking: undefined, others: [] };
  for (const c of conflicts) {
    if (c.kind === 'frontend_not_owned') sorted.blocking ??= c;
    else sorted.others.push(c);
  }
  return sorted;
}
