import { ALLOW_VALUE, isAllowKey, slotOfKey } from './allow-keys.js';

/**
 * Authorized networks in HAProxy: one map per slot, which the slot's backend looks its source up in
 * (`src,map_ip(<file>) -m str 1`, `edge.ts`: the longest prefix that holds the source decides). The plan
 * keeps one logical allow map per owner (a flag per restricted slot, `<network>|<slot>` per network:
 * `allow.ts`); this module turns it into the slots' maps and back, so that a list change writes one small
 * file rather than every list. Pure.
 *
 * An open slot's map holds `OPEN_NETWORKS`: every IPv4 and every IPv6 source. A restricted slot's map holds
 * its networks (`1`) and, unless the list holds them itself, two refusals (`0`, `DENIED`): HAProxy judges an
 * IPv6 source that no IPv6 key holds by the IPv4 address inside it, and an IPv4 source no IPv4 key holds as
 * `::ffff:a.b.c.d`. So an IPv4 client (seen as `::ffff:a.b.c.d` on a dual-stack bind, whose keys `allowKeys`
 * doubles) is judged by the IPv4 networks only, and `::1` and the rest of `::/96` by IPv6 networks as
 * narrow as /96 or narrower: `0.0.0.0/0` does not let `::1` in, nor `::/0` every IPv4 client. A 6to4 source
 * (`2002:AABB:CCDD::/48`) that no IPv6 network holds is judged by its IPv4 address, whose host its replies go
 * through. Checked on HAProxy 2.6, 3.0 and 3.2 (docs/design/per-slot-allow-maps.md).
 *
 * Runtime commands follow the logical operations in order, each as the difference between the slot's map
 * before and after it: additions first, then entries whose value changes (deleted, added again), then
 * deletions (refusals first). A client both lists allow always finds an allowing entry, and a slot holds the open networks
 * only while its old or its new list is open.
 */

/** What an open slot's map holds. */
export const OPEN_NETWORKS: readonly string[] = ['0.0.0.0/0', '::/0'];

/** A restricted slot's refusals: IPv4-compatible sources (`::1`), and IPv4 sources as mapped IPv6. */
export const DENIED: readonly string[] = ['::/96', '::ffff:0.0.0.0/96'];

/** The value of a refusal. */
export const DENY_VALUE = '0';

/** The name of `slot`'s map, beside the owner's logical allow map (`<owner>.allow.map`). */
export function slotAllowMapName(allowMap: string, slot: string): string {
  const base = allowMap.endsWith('.map') ? allowMap.slice(0, -'.map'.length) : allowMap;
  return `${base}.${slot}.map`;
}

/** The entries (network -> value) of `slot`'s map for its logical keys (none, or no flag: open). */
export function slotEntries(slot: string, keys: ReadonlySet<string> | undefined): Map<string, string> {
  const out = new Map<string, string>();
  if (!keys?.has(slot)) {
    for (const n of OPEN_NETWORKS) out.set(n, ALLOW_VALUE);
    return out;
  }
  const networks: string[] = [];
  for (const k of keys) if (k !== slot) networks.push(k.slice(0, k.length - slot.length - 1));
  for (const n of networks.sort()) out.set(n, ALLOW_VALUE);
  for (const n of DENIED) if (!out.has(n)) out.set(n, DENY_VALUE);
  return out;
}

/** The text of `slot`'s map file: `<network> <value>` per line, every logical key checked first. */
export function slotMapText(slot: string, keys: ReadonlySet<string> | undefined): string {
  for (const k of keys ?? [])
    if (!isAllowKey(k) || slotOfKey(k) !== slot)
      throw new RangeError(`refusing to write allow key ${JSON.stringify(k)} to ${slot}'s map`);
  // Joined, not appended: a text built by `+=` stays a tree of pieces (106 of them, 3.7 KB for 600 bytes of
  // text), and the providers keep every slot's text (18.7 MB at N = 5000 × 16, a heap snapshot).
  const lines: string[] = [];
  for (const [n, v] of slotEntries(slot, keys)) lines.push(`${n} ${v}\n`);
  return lines.join('');
}

/**
 * The logical keys that a slot's map stands for: none when it holds exactly the open networks, else the
 * flag and a key per entry but this module's refusals. An entry this module would not write (a hand edit)
 * still gives its key, unchecked: the planner deletes every key it does not want, and the delete names the
 * network as HAProxy holds it.
 */
export function keysOfSlotMap(slot: string, entries: ReadonlyMap<string, string>): string[] {
  if (entries.size === OPEN_NETWORKS.length && OPEN_NETWORKS.every((n) => entries.get(n) === ALLOW_VALUE))
    return [];
  const keys = [slot];
  for (const [network, value] of entries)
    if (!(value === DENY_VALUE && DENIED.includes(network))) keys.push(`${network}|${slot}`);
  return keys;
}

/** A runtime change of one slot's map. */
export interface SlotMapOp {
  kind: 'add' | 'delete';
  /** The slot's map (`slotAllowMapName`). */
  map: string;
  slot: string;
  network: string;
  /** The entry's value: what an addition adds, what a deletion removes (`1`, or `DENY_VALUE`). */
  value: string;
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
  return slotMapSteps(allowMap, ops, keysOf).flat();
}

/** `slotMapOps`, one list per logical operation (possibly empty), in the order of `ops`. */
export function slotMapSteps(
  allowMap: string,
  ops: ReadonlyArray<{ kind: 'add_allow_entry' | 'delete_allow_entry'; key: string }>,
  keysOf: (slot: string) => ReadonlySet<string> | undefined,
): SlotMapOp[][] {
  const state = new Map<string, Set<string>>();
  return ops.map((op) => {
    const slot = slotOfKey(op.key);
    let keys = state.get(slot);
    if (!keys) {
      keys = new Set(keysOf(slot));
      state.set(slot, keys);
    }
    const before = slotEntries(slot, keys);
    if (op.kind === 'add_allow_entry') keys.add(op.key);
    else keys.delete(op.key);
    const after = slotEntries(slot, keys);
    const map = slotAllowMapName(allowMap, slot);
    const out: SlotMapOp[] = [];
    const add = (network: string, value: string) => out.push({ kind: 'add', map, slot, network, value });
    const del = (network: string) =>
      out.push({ kind: 'delete', map, slot, network, value: before.get(network) as string });
    for (const [n, v] of after) if (!before.has(n)) add(n, v);
    for (const [n, v] of after)
      if (before.has(n) && before.get(n) !== v) {
        del(n);
        add(n, v);
      }
    // Refusals go before the networks they shadow: only a slot that opens loses them, and the open networks
    // (added above) then hold every source, so no source both lists allow finds a refusal alone in between.
    for (const [n, v] of before) if (!after.has(n) && v === DENY_VALUE) del(n);
    for (const [n, v] of before) if (!after.has(n) && v !== DENY_VALUE) del(n);
    return out;
  });
}
