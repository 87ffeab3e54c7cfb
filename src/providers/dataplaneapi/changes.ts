import type { Change } from '../provider.js';
import type { RuntimeOp } from '../runtime-steps.js';

export interface Touched {
  frontends: Set<string>;
  backends: Set<string>;
  maps: Set<string>;
}

/** The slots' servers and the maps runtime steps changed: what persistence is to write. */
export function touchedBy(steps: readonly RuntimeOp[]): Omit<Touched, 'frontends'> {
  const out = { backends: new Set<string>(), maps: new Set<string>() };
  for (const op of steps) {
    if (
      op.kind === 'set_map_entry' ||
      op.kind === 'delete_map_entry' ||
      op.kind === 'add_allow_entry' ||
      op.kind === 'delete_allow_entry'
    )
      out.maps.add(op.map);
    else out.backends.add(op.backend);
  }
  return out;
}

/**
 * The owned frontends, backends and maps a change makes other (created, changed or deleted): what a write
 * of the files rewrites. A reading's objects are kept as they are (the same object) by `applyOperations`
 * unless an operation changes them, so identity says what changed.
 */
export function changedSections(change: Change): Touched {
  const { from, to } = change;
  const out: Touched = { frontends: new Set(), backends: new Set(), maps: new Set() };
  for (const f of to.state.frontends) if (f.owned && from.frontend(f.name) !== f) out.frontends.add(f.name);
  for (const f of from.state.frontends) if (f.owned && !to.frontend(f.name)) out.frontends.add(f.name);
  for (const b of to.state.backends) if (b.owned && from.backend(b.name) !== b) out.backends.add(b.name);
  for (const b of from.state.backends) if (b.owned && !to.backend(b.name)) out.backends.add(b.name);
  const before = new Map((from.state.maps ?? []).map((m) => [m.name, m.entries]));
  for (const m of to.state.maps ?? []) if (before.get(m.name) !== m.entries) out.maps.add(m.name);
  return out;
}
