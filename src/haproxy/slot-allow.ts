import { ALLOW_VALUE, isAllowKey, slotOfKey } from './allow-keys.js';

/**
 * Authorized networks in HAProxy: one map per slot, which the slot's backend looks its source up in
 * (`src,map_ip(<file>) -m found`, `edge.ts`). The plan keeps one logical allow map per owner (a flag per
 * restricted slot, `<network>|<slot>` per network: `allow.ts`); this module turns it into the slots' maps and
 * back, so that a list change writes one small file rather than every list. Pure.
 *
 * An open slot's map holds `OPEN_NETWORKS`: every IPv4 and every IPv6 source. A restricted slot's map holds
 * its networks. Runtime commands follow the logical operations in order, each as the difference between the
 * slot's map before and after it, additions first: a client both lists allow always finds an entry, and a
 * slot holds the open networks only while its old or its new list is open.
 */

/** What an open slot's map holds. */
export const OPEN_NETWORKS: readonly string[] = ['0.0.0.0/0', '::/0'];

/** The name of `slot`'s map, beside the owner's logical allow map (`<owner>.allow.map`). */
export function slotAllowMapName(allowMap: string, slot: string): string {
  const base = allowMap.endsWith('.map') ? allowMap.slice(0, -'.map'.length) : allowMap;
  return `${base}.${slot}.map`;
}

/** The networks of `slot`'s map for its logical keys (none, or no flag: open). */
export function slotNetworks(slot: string, keys: ReadonlySet<string> | undefined): string[] {
  if (!keys?.has(slot)) return [...OPEN_NETWORKS];
  const out: string[] = [];
  for (const k of keys) if (k !== slot) out.push(k.slice(0, k.length - slot.length - 1));
  return out.sort();
}

/** The text of `slot`'s map file: `<network> 1` per line, every logical key checked first. */
export function slotMapText(slot: string, keys: ReadonlySet<string> | undefined): string {
  for (const k of keys ?? [])
    if (!isAllowKey(k) || slotOfKey(k) !== slot)
      throw new RangeError(`refusing to write allow key ${JSON.stringify(k)} to ${slot}'s map`);
  return slotNetworks(slot, keys)
    .map((n) => `${n} ${ALLOW_VALUE}\n`)
    .join('');
}

/**
 * The logical keys that a slot's map stands for: none when it holds exactly the open networks, else the
 * flag and a key per network. Undefined when an entry is not one this module writes (a foreign edit).
 */
export function keysOfSlotMap(slot: string, entries: ReadonlyMap<string, string>): string[] | undefined {
  if (entries.size === OPEN_NETWORKS.length && OPEN_NETWORKS.every((n) => entries.get(n) === ALLOW_VALUE))
    return [];
  const keys = [slot];
  for (const [network, value] of entries) {
    const key = `${network}|${slot}`;
    if (value !== ALLOW_VALUE || !isAllowKey(key)) return undefined;
    keys.push(key);
  }
  return keys;
}

/** A runtime change of one slot's map. */
export interface SlotMapOp {
  kind: 'add' | 'delete';
  /** The slot's map (`slotAllowMapName`). */
  map: string;
  slot: string;
  network: string;
}

/**
 * The runtime changes of the slots' maps that the logical operations `ops` (in the plan's order) make,
 * from the slots' logical keys before them (`keysOf`, for the slots `ops` touch).
 */
export function slotMapOps(
  allowMap: string,
  ops: ReadonlyArray<{ kind: 'add_allow_entry' | 'delete_allow_entry'; key: string }>,
  keysOf: (slot: string) => ReadonlySet<string> | undefined,
): SlotMapOp[] {
  const state = new Map<string, Set<string>>();
  const out: SlotMapOp[] = [];
  for (const op of ops) {
    const slot = slotOfKey(op.key);
    let keys = state.get(slot);
    if (!keys) {
      keys = new Set(keysOf(slot));
      state.set(slot, keys);
    }
    const before = new Set(slotNetworks(slot, keys));
    if (op.kind === 'add_allow_entry') keys.add(op.key);
    else keys.delete(op.key);
    const after = new Set(slotNetworks(slot, keys));
    const map = slotAllowMapName(allowMap, slot);
    for (const network of after) if (!before.has(network)) out.push({ kind: 'add', map, slot, network });
    for (const network of before) if (!after.has(network)) out.push({ kind: 'delete', map, slot, network });
  }
  return out;
}
