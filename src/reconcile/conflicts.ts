import type { DesiredBackend } from '../haproxy/model.js';
import type { Conflict } from '../plan/plan.js';

export interface SortedConflicts {
  /** A foreign frontend under the service's name: it blocks every route, nothing may be applied. */
  blocking: Conflict | undefined;
  /** Each conflicted cluster's reason: a foreign object holds the name of its backend. */
  byCluster: Map<string, string>;
  /** Conflicts that are no cluster's (e.g. a missing default backend): for the log. */
  others: Conflict[];
}

/** A plan's conflicts, told apart by whom they stop: every route, one cluster, or nobody in particular. Pure. */
export function sortConflicts(
  conflicts: readonly Conflict[],
  backends: readonly Pick<DesiredBackend, 'name' | 'cluster'>[],
): SortedConflicts {
  const clusterOf = new Map(backends.map((b) => [b.name, b.cluster]));
  const sorted: SortedConflicts = { blocking: undefined, byCluster: new Map(), others: [] };
  for (const c of conflicts) {
    const cluster = clusterOf.get(c.name);
    if (c.kind === 'frontend_not_owned') sorted.blocking ??= c;
    else if (cluster !== undefined) sorted.byCluster.set(cluster, c.detail);
    else sorted.others.push(c);
  }
  return sorted;
}
