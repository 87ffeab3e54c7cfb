import { isAllowKey, slotOfKey } from './allow-keys.js';
import type { RawMap } from './model.js';
import { DENIED, type SlotMapOp, slotAllowMapName, slotMapSteps, slotMapText } from './slot-allow.js';

/**
 * The logical allow map (authorized networks, `allow.ts`) kept by slot, for the providers that turn it into
 * the slots' own maps (`slot-allow.ts`): a list change's runtime commands need the slot's keys before the
 * change, and its files the text of each slot it touched. At 5000 clusters × 16 networks the map holds 85 000
 * keys; grouping them all again on every list change cost tens of ms, so the index follows the states it is
 * given and, when told exactly what changed, touches only those slots.
 *
 * Incremental only when told exactly what changed: `follow(entries, { from, keys })` changes only the slots of
 * `keys` when `from` is the very entries object followed last (states are never changed in place,
 * `model.ts`), so `entries` is `from` with those keys added or deleted; anything else groups all again.
 * Keys are not checked here: a key read back may be a hand edit, which the planner deletes. What is written
 * is checked: a slot's text (`slotMapText`) and every network a runtime change adds.
 */
export class SlotAllowIndex {
  /** Slot -> its keys, and its map's text once asked for. */
  private readonly slots = new Map<string, Slot>();
  private keys = 0;
  private basis: ReadonlyMap<string, string> | undefined;

  /** `refuse` makes the error a key or value that must not reach HAProxy is thrown as. */
  constructor(private readonly refuse: (detail: string) => Error) {}

  /** Brings the index to `entries`: only the slots of `since.keys` when told exactly what changed. */
  follow(entries: ReadonlyMap<string, string>, since?: Since): void {
    if (entries === this.basis) return;
    try {
      if (since && since.from === this.basis && this.basis !== undefined) {
        for (const key of since.keys) this.touch(key, entries);
        // The keys said must account for every entry; if not, all is grouped from the entries.
        if (this.keys !== entries.size) this.rebuild(entries);
      } else this.rebuild(entries);
      this.basis = entries;
    } catch (err) {
      this.reset();
      throw err;
    }
  }

  /** The logical keys of `slot` in the entries followed last (none: an open or unheld slot). */
  keysOf(slot: string): ReadonlySet<string> | undefined {
    return this.slots.get(slot)?.keys;
  }

  /** The text of `slot`'s own map file for the entries followed last (`slotMapText`). */
  text(slot: string): string {
    const s = this.slots.get(slot);
    if (!s) return slotMapText(slot, undefined);
    s.text ??= this.checked(() => slotMapText(slot, s.keys));
    return s.text;
  }

  /**
   * The runtime changes of the slots' maps that the logical operations `ops` of `allowMap` make, one list
   * per operation, from the entries followed last (`slotMapSteps`): the index is not moved on (the caller
   * follows the target once they ran). A network added must be one this service writes.
   */
  runtimeSteps(
    allowMap: string,
    ops: ReadonlyArray<{ kind: 'add_allow_entry' | 'delete_allow_entry'; key: string }>,
  ): SlotMapOp[][] {
    const out = slotMapSteps(allowMap, ops, (slot) => this.keysOf(slot));
    for (const op of out.flat())
      if (op.kind === 'add' && !(isAllowKey(`${op.network}|${op.slot}`) || DENIED.includes(op.network)))
        throw this.refuse(`refusing to send allow-map network ${JSON.stringify(op.network)} to HAProxy`);
    return out;
  }

  /**
   * Each allow operation among `ops` with the runtime changes of its slot's map, from the allow maps of
   * `from` (`runtimeSteps`, one logical map at a time): the index follows `from`. What both providers send.
   */
  stepsFrom<Op extends { kind: string }>(ops: readonly Op[], from: WithMaps): Map<Op, SlotMapOp[]> {
    const out = new Map<Op, SlotMapOp[]>();
    for (const [map, group] of byMap(ops.filter(isAllowOp))) {
      this.follow(entriesOf(from, map) ?? new Map());
      const steps = this.runtimeSteps(map, group);
      group.forEach((op, i) => {
        out.set(op, steps[i] ?? []);
      });
    }
    return out;
  }

  /**
   * The slots' own maps that the allow keys `ops` added or deleted touch, with their text in `to`: the
   * index follows `to` from `from`, told those keys. What both providers write before a list change's answer.
   */
  touchedMaps(
    ops: ReadonlyArray<{ map: string; key: string }>,
    from: WithMaps,
    to: WithMaps,
  ): Array<{ map: string; text: string }> {
    const out: Array<{ map: string; text: string }> = [];
    for (const [name, group] of byMap(ops)) {
      const before = entriesOf(from, name);
      const keys = group.map((o) => o.key);
      this.follow(entriesOf(to, name) ?? new Map(), before ? { from: before, keys } : undefined);
      for (const slot of new Set(keys.map(slotOfKey)))
        out.push({ map: slotAllowMapName(name, slot), text: this.text(slot) });
    }
    return out;
  }

  private touch(key: string, entries: ReadonlyMap<string, string>): void {
    const slot = slotOfKey(key);
    let s = this.slots.get(slot);
    if (!entries.has(key)) {
      if (!s?.keys.delete(key)) return;
      this.keys--;
      s.text = undefined;
      if (s.keys.size === 0) this.slots.delete(slot);
      return;
    }
    if (!s) {
      s = { keys: new Set(), text: undefined };
      this.slots.set(slot, s);
    }
    if (s.keys.has(key)) return;
    s.keys.add(key);
    s.text = undefined;
    this.keys++;
  }

  private rebuild(entries: ReadonlyMap<string, string>): void {
    this.reset();
    for (const key of entries.keys()) {
      const slot = slotOfKey(key);
      let s = this.slots.get(slot);
      if (!s) {
        s = { keys: new Set(), text: undefined };
        this.slots.set(slot, s);
      }
      s.keys.add(key);
    }
    this.keys = entries.size;
  }

  private checked(make: () => string): string {
    try {
      return make();
    } catch (err) {
      throw this.refuse(err instanceof Error ? err.message : String(err));
    }
  }

  private reset(): void {
    this.slots.clear();
    this.keys = 0;
    this.basis = undefined;
  }
}

/** A state's maps (`RawState`, `HaproxyState`). */
interface WithMaps {
  readonly maps?: readonly RawMap[];
}

type AllowOp = { kind: 'add_allow_entry' | 'delete_allow_entry'; map: string; key: string };

const isAllowOp = <Op extends { kind: string }>(op: Op): op is Op & AllowOp =>
  op.kind === 'add_allow_entry' || op.kind === 'delete_allow_entry';

const entriesOf = (state: WithMaps, map: string) => state.maps?.find((m) => m.name === map)?.entries;

/** `items` by their map, in order. Appended in place: a copy per item is quadratic (85 000 keys at 5000 × 16). */
function byMap<T extends { map: string }>(items: Iterable<T>): Map<string, T[]> {
  const out = new Map<string, T[]>();
  for (const item of items) {
    const group = out.get(item.map);
    if (group) group.push(item);
    else out.set(item.map, [item]);
  }
  return out;
}

/** What changed since the entries followed last: `from`, those entries, and the keys added or deleted. */
interface Since {
  from: ReadonlyMap<string, string>;
  keys: Iterable<string>;
}

interface Slot {
  keys: Set<string>;
  text: string | undefined;
}
