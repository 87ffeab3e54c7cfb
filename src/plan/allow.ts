import { allowKeys, slotOfKey } from '../haproxy/allow-keys.js';
import type { DesiredRoute } from '../haproxy/model.js';
import type { Operation } from './operations.js';

/**
 * Authorized networks' half of the planner: the allow map's keys per slot (`edge.ts`), and the order they
 * change in. Pure. A slot's keys are its flag (its name: the slot is restricted) and `<network>|<slot>` for
 * each network, so one cluster's change never touches another's keys, and a slot freed by one cluster
 * loses its keys in the plan that frees it (a slot is reused only by a later plan): the next cluster never
 * inherits a list.
 *
 * Order within a plan (`AllowStage`): a routed slot that becomes open loses its flag first; new network keys
 * come before a flag that restricts, and both before the SNI map names the slot; keys no longer wanted go
 * after the SNI map's changes. So a client that both the old and the new list allow always finds one of its
 * keys, and a restricted cluster is never open to all in between.
 */
export interface AllowInput {
  map: string;
  dualStack: boolean;
  /** The allow map's keys now, grouped by slot (`keysBySlot`). */
  current: ReadonlyMap<string, ReadonlySet<string>>;
}

/** The allow map's keys grouped by the slot each names (a flag is its slot's name; a network key ends `|slot`). */
export function keysBySlot(entries: ReadonlyMap<string, string> | undefined): Map<string, Set<string>> {
  const out = new Map<string, Set<string>>();
  for (const key of entries?.keys() ?? []) {
    const slot = slotOfKey(key);
    let set = out.get(slot);
    if (!set) {
      set = new Set();
      out.set(slot, set);
    }
    set.add(key);
  }
  return out;
}

/**
 * The operations that bring `slot`'s keys to what `route` wants (none when `route` is undefined: the slot
 * is freed or stays free). `routedAfter`: a host still routes to the slot once the plan is applied.
 */
export function planSlotAllow(
  input: AllowInput,
  slot: string,
  route: DesiredRoute | undefined,
  ops: Operation[],
): void {
  const have = input.current.get(slot);
  const want = route ? allowKeys(slot, route.networks, input.dualStack) : [];
  if (want.length === 0 && (have === undefined || have.size === 0)) return;
  const wanted = new Set(want);
  const map = input.map;
  const flagged = have?.has(slot) ?? false;
  // A routed slot that opens: its flag goes first (everyone may connect from then on, as the new list says).
  if (flagged && !wanted.has(slot) && route)
    ops.push({ kind: 'delete_allow_entry', map, key: slot, stage: 'open' });
  for (const key of want)
    if (!have?.has(key))
      ops.push({ kind: 'add_allow_entry', map, key, stage: key === slot ? 'flag' : 'entry' });
  for (const key of have ?? [])
    if (!wanted.has(key) && !(key === slot && route))
      ops.push({ kind: 'delete_allow_entry', map, key, stage: 'after' });
}
