import { slotOfKey } from '../../haproxy/allow-keys.js';
import { CowMap } from '../../haproxy/cow-map.js';
import { slotAllowMapName } from '../../haproxy/slot-allow.js';
import type { Change } from '../provider.js';
import type { RuntimeOp } from '../runtime-steps.js';

export interface Touched {
  frontends: Set<string>;
  backends: Set<string>;
  maps: Set<string>;
}

/**
 * The slots' servers and the maps runtime steps changed: what persistence is to write. An allow key names
 * its slot's own map (`slot-allow.ts`).
 */
export function touchedBy(steps: readonly RuntimeOp[]): Omit<Touched, 'frontends'> {
  const out = { backends: new Set<string>(), maps: new Set<string>() };
  for (const op of steps) {
    if (op.kind === 'add_allow_entry' || op.kind === 'delete_allow_entry')
      out.maps.add(slotAllowMapName(op.map, slotOfKey(op.key)));
    else if (op.kind === 'set_map_entry' || op.kind === 'delete_map_entry') out.maps.add(op.map);
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
  const allowMaps = new Set(to.state.frontends.flatMap((f) => (f.owned && f.edge ? [f.edge.allowMap] : [])));
  for (const m of to.state.maps ?? []) {
    const was = before.get(m.name);
    if (was === m.entries) continue;
    if (!allowMaps.has(m.name)) out.maps.add(m.name);
    else for (const slot of changedSlots(was, m.entries)) out.maps.add(slotAllowMapName(m.name, slot));
  }
  return out;
}

/** The slots whose allow keys differ between two states of the logical allow map. */
function changedSlots(
  from: ReadonlyMap<string, string> | undefined,
  to: ReadonlyMap<string, string>,
): Set<string> {
  const keys =
    (from && CowMap.changedKeys(from, to)) ??
    new Set(
      [...(from?.keys() ?? [])].filter((k) => !to.has(k)).concat([...to.keys()].filter((k) => !from?.has(k))),
    );
  return new Set([...keys].map(slotOfKey));
}
