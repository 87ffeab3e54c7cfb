import type { BackendState, DesiredConfig, HaproxyState, ServerState } from '../haproxy/model.js';
import { lowerBound } from '../model/sorted.js';
import { slotNumber } from '../naming/names.js';
import { keysBySlot } from './allow.js';
import type { Conflict, Operation } from './operations.js';
import { planStructure } from './plan.js';
import type { Reading } from './reading.js';
import { isGuarded } from './slots.js';

/** An owned slot backend of the pool, as the index knows it. */
export interface Slot {
  name: string;
  number: number;
  backend: BackendState;
  /** Map entries that name it. */
  refs: number;
}

/** The operations an index follows; any other changes the structure it was built against. */
const FOLLOWED: ReadonlySet<Operation['kind']> = new Set([
  'create_backend',
  'create_server',
  'update_server',
  'delete_server',
  'set_map_entry',
  'delete_map_entry',
  'add_allow_entry',
  'delete_allow_entry',
]);

/** Strays beyond this many are not worth keeping apart: the next full pass clears them. */
const MAX_STRAYS = 64;

/**
 * Map routing's view of one reading, for planning a few hosts (`scoped.ts`): the owned map's entries, the
 * owned slots by name, the free slots in slot order, the slots no entry names that hold servers (strays),
 * and whether anything outside the slots and entries would make a full plan differ (`doubt`). Built once,
 * O(N); then advanced by the operations applied to its reading, O(operations), as long as every reading is
 * one derived from the last (`Reading.derive`).
 */
export class RoutingIndex {
  readonly slots = new Map<string, Slot>();
  /** Slots no entry names and without servers, by number. */
  readonly free: Slot[] = [];
  /** Slots no entry names that hold servers. */
  readonly strays = new Set<Slot>();
  entries: ReadonlyMap<string, string> = new Map();
  /** The allow map's keys by the slot they name (`allow.ts`). */
  readonly allow: Map<string, Set<string>>;
  /** Slots named by at least one entry. */
  named = 0;
  /** The structure's own conflicts (none blocking), reported by every plan made from this state. */
  readonly conflicts: Conflict[];
  private serial: number;
  private structureDoubt: string | undefined;
  /** Entries naming no owned slot, or a slot another entry names too. */
  private badEntries = 0;
  private ownedStrays = 0;
  private sameNumber = 0;
  /** Slots the allow map names that are no slot of ours: counted as they come and go, not looked up per plan. */
  private allowStrays = 0;
  /** Slots without their guard (`isGuarded`): the full planner writes it. */
  private unguarded = 0;
  private readonly numbers = new Set<number>();

  constructor(
    reading: Reading,
    /** The desired frontend and routing settings, without routes (`RoutingIndexCache`). */
    private readonly desired: DesiredConfig,
  ) {
    this.serial = reading.serial;
    const raw = reading.state;
    const routing = desired.routing;
    const structure = planStructure(desired, structureOf(raw, desired));
    this.conflicts = structure.conflicts;
    if (structure.blocked) this.structureDoubt = 'a foreign frontend holds our name';
    else if (structure.operations.length > 0) this.structureDoubt = 'the structure changes';
    for (const b of raw.backends) this.addSlot(b);
    this.entries = mapEntries(raw, routing.map);
    for (const backend of this.entries.values()) this.ref(backend, 1);
    this.allow = keysBySlot(mapEntries(raw, routing.allowMap));
    for (const slot of this.allow.keys()) if (!this.slots.has(slot)) this.allowStrays++;
    // Filed in listing order, sorted once (not one insertion each).
    for (const slot of this.slots.values()) this.classify(slot, true);
    this.free.sort((a, b) => a.number - b.number);
  }

  /** Why a plan of a few hosts could differ from the full plan here; undefined when it cannot. */
  get doubt(): string | undefined {
    if (this.structureDoubt) return this.structureDoubt;
    if (this.badEntries > 0) return 'a map entry names no slot of its own';
    if (this.ownedStrays > 0 || this.strays.size > MAX_STRAYS) return 'a slot no entry names holds servers';
    if (this.sameNumber > 0) return 'two slots of one number';
    if (this.allowStrays > 0) return 'an allow key names no slot of ours';
    if (this.unguarded > 0) return 'a slot lacks its guard';
    return undefined;
  }

  describes(reading: Reading): boolean {
    return this.serial === reading.serial;
  }

  /** A slot's servers. */
  servers(slot: Slot): readonly ServerState[] {
    return slot.backend.servers;
  }

  /** `hosts` in the order the map lists them (the order the full planner deletes entries in). */
  inEntryOrder(hosts: readonly string[]): string[] {
    if (hosts.length < 2) return [...hosts];
    const wanted = new Set(hosts);
    const out: string[] = [];
    for (const host of this.entries.keys()) {
      if (!wanted.has(host)) continue;
      out.push(host);
      if (out.length === wanted.size) break;
    }
    return out;
  }

  /**
   * Moves the index on to `raw` when `raw` is its state with some operations applied (and those only touch
   * slots' servers, map entries and new slots); false when it must be built again.
   */
  advance(reading: Reading): boolean {
    const d = reading.parent;
    const routing = this.desired.routing;
    if (!d || d.serial !== this.serial) return false;
    // Structure changed (a cold start's frontend, a rule): built again, before anything here is touched.
    if (!d.operations.every((op) => FOLLOWED.has(op.kind))) return false;
    const touched = new Set<string>();
    // Slots the pool grew by first: entries in the same operations may name them. They come in free.
    for (const op of d.operations) {
      if (op.kind !== 'create_backend') continue;
      const b = reading.backend(op.backend.name);
      if (!b || !this.addSlot(b)) return false;
      touched.add(b.name);
    }
    for (const op of d.operations) if (!this.follow(op, routing.map, touched)) return false;
    this.entries = mapEntries(reading.state, routing.map);
    for (const name of touched) {
      const slot = this.slots.get(name);
      const now = reading.backend(name);
      if (!slot) continue;
      if (!now) return false;
      this.unclassify(slot);
      if (isGuarded(routing, now) !== isGuarded(routing, slot.backend))
        this.unguarded += isGuarded(routing, now) ? -1 : 1;
      slot.backend = now;
      this.classify(slot);
    }
    this.serial = reading.serial;
    return true;
  }

  private follow(op: Operation, map: string, touched: Set<string>): boolean {
    switch (op.kind) {
      case 'set_map_entry':
        if (op.map !== map) return true;
        if (op.previous !== null) this.ref(op.previous, -1);
        this.ref(op.backend, 1);
        for (const name of [op.previous, op.backend]) if (name !== null) touched.add(name);
        return true;
      case 'delete_map_entry':
        if (op.map !== map) return true;
        this.ref(op.backend, -1);
        touched.add(op.backend);
        return true;
      case 'create_server':
      case 'update_server':
      case 'delete_server':
        touched.add(op.backend);
        return true;
      case 'create_backend':
        return true; // a slot, filed above
      case 'add_allow_entry':
      case 'delete_allow_entry': {
        if (op.map !== this.desired.routing.allowMap) return true;
        const bar = op.key.lastIndexOf('|');
        const slot = bar < 0 ? op.key : op.key.slice(bar + 1);
        let keys = this.allow.get(slot);
        if (!keys) {
          keys = new Set();
          this.allow.set(slot, keys);
          if (!this.slots.has(slot)) this.allowStrays++;
        }
        if (op.kind === 'add_allow_entry') keys.add(op.key);
        else keys.delete(op.key);
        if (keys.size === 0) {
          this.allow.delete(slot);
          if (!this.slots.has(slot)) this.allowStrays--;
        }
        return true;
      }
      default:
        return false;
    }
  }

  /** Files an owned slot backend (its entries counted by the caller); undefined for any other backend. */
  private addSlot(b: BackendState): Slot | undefined {
    const number = slotNumber(this.desired.routing.slotPrefix, b.name);
    if (number === undefined || !b.owned) return undefined;
    if (this.numbers.has(number)) this.sameNumber++;
    this.numbers.add(number);
    const slot = { name: b.name, number, backend: b, refs: 0 };
    if (!isGuarded(this.desired.routing, b)) this.unguarded++;
    // Keys filed before their slot (the pool grows in the same operations) now name one of ours.
    if (this.allowStrays > 0 && !this.slots.has(b.name) && this.allow.has(b.name)) this.allowStrays--;
    this.slots.set(b.name, slot);
    return slot;
  }

  /** Counts an entry naming `backend` (in or out); a slot's class is brought up to date by the caller. */
  private ref(backend: string, delta: 1 | -1): void {
    const slot = this.slots.get(backend);
    if (!slot) {
      this.badEntries += delta;
      return;
    }
    const before = slot.refs;
    slot.refs += delta;
    // A second entry on one slot is a bad entry; the count of named slots moves on 0 <-> 1.
    if (Math.max(before, slot.refs) > 1) this.badEntries += delta;
    if (Math.min(before, slot.refs) === 0) this.named += delta;
  }

  private classify(slot: Slot, unsorted = false): void {
    if (slot.refs > 0) return;
    if (slot.backend.servers.length === 0) {
      if (unsorted) this.free.push(slot);
      else
        this.free.splice(
          lowerBound(this.free, (s) => s.number < slot.number),
          0,
          slot,
        );
      return;
    }
    this.strays.add(slot);
    if (slot.backend.servers.some((s) => s.owned)) this.ownedStrays++;
  }

  private unclassify(slot: Slot): void {
    const i = lowerBound(this.free, (s) => s.number < slot.number);
    if (this.free[i] === slot) this.free.splice(i, 1);
    if (this.strays.delete(slot) && slot.backend.servers.some((s) => s.owned)) this.ownedStrays--;
  }
}

/** The owned map's entries (empty when the state has none). */
function mapEntries(state: HaproxyState, map: string): ReadonlyMap<string, string> {
  return state.maps?.find((m) => m.name === map)?.entries ?? new Map();
}

/** What `planStructure` looks at: frontends, the backends that are no slot, and the default backend. */
function structureOf(raw: HaproxyState, desired: DesiredConfig): HaproxyState {
  const prefix = desired.routing.slotPrefix;
  const fallback = desired.frontend.defaultBackend;
  const backends = raw.backends.filter(
    (b) => slotNumber(prefix, b.name) === undefined || b.name === fallback,
  );
  return { frontends: raw.frontends, backends, ...(raw.maps ? { maps: raw.maps } : {}) };
}

/** One index per lineage of states: reused, advanced, or built again when the state read is another. */
export class RoutingIndexCache {
  private index: RoutingIndex | undefined;
  private key = '';

  /** The index of `raw` for `desired`'s frontend and routing settings (its routes do not matter). */
  for(reading: Reading, desired: DesiredConfig): RoutingIndex {
    const shape = shapeOf(desired);
    const key = JSON.stringify(shape);
    const i = this.index;
    if (i && key === this.key && (i.describes(reading) || i.advance(reading))) return i;
    this.key = key;
    this.index = new RoutingIndex(reading, shape);
    return this.index;
  }
}

/** The desired state without its routes: all a routing index depends on. */
function shapeOf(d: DesiredConfig): DesiredConfig {
  return { frontend: d.frontend, routing: { ...d.routing, routes: [] } };
}
