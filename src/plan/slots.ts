import type {
  BackendState,
  DesiredRoute,
  DesiredRouting,
  HaproxyState,
  ServerState,
} from '../haproxy/model.js';
import { slotAllowMapName } from '../haproxy/slot-allow.js';
import { slotName, slotNumber } from '../naming/names.js';
import { keysBySlot, planSlotAllow } from './allow.js';
import type { Operation, PoolReport } from './operations.js';

/**
 * Map routing's half of the planner: which slot backend serves which host, and how big the pool is. Pure.
 *
 * - A host keeps the slot its map entry names; a new host takes the lowest free slot (no entry names it and
 *   it has no servers): servers first, then the map entry, so a host never routes to an empty slot.
 * - A host no longer wanted loses its map entry first; its slot's servers go after, and the slot is free for
 *   the next plan (never reused in the plan that frees it, so no host ever sees another's servers).
 * - The pool grows geometrically (×1.5 once 7/8 of it is held), so N routes cost O(log N) reloads. Growth
 *   waits for a pass that allows it (`grow: 'ahead'`) unless a route found no free slot.
 */
export const POOL_FILL = 7 / 8;
export const POOL_FACTOR = 1.5;

/** The pool size `used` routes want, from a pool of `size` (never smaller than `min`, never shrinking). */
export function poolSize(size: number, used: number, min: number): number {
  let target = Math.max(size, min);
  while (used >= target * POOL_FILL) target = Math.ceil(target * POOL_FACTOR);
  return target;
}

export type ServerPlanner = (
  backend: string,
  want: DesiredRouting['routes'][number]['servers'],
  have: readonly ServerState[],
  ops: Operation[],
) => void;

export function planRouting(
  want: DesiredRouting,
  current: HaproxyState,
  grow: 'ahead' | 'when_needed',
  planServers: ServerPlanner,
  ops: Operation[],
): PoolReport {
  // Every structure here is O(N) in routes or slots: built once, in single passes, with nothing kept that a
  // later step can recompute from another (this runs on every pass, for every route).
  const slots = slotsOf(want.slotPrefix, current.backends);
  const entries = current.maps?.find((m) => m.name === want.map)?.entries ?? new Map<string, string>();
  const wanted = new Set<string>();
  for (const r of want.routes) wanted.add(r.host);
  const assignments = new Map<string, string>();
  const held = new Set<string>();
  // A slot an entry still names is draining in this plan even when its host is deleted: not reused now.
  const draining = new Set<string>();
  for (const [host, backend] of entries) {
    const isWanted = wanted.has(host);
    if (isWanted && slots.has(backend) && !held.has(backend)) {
      held.add(backend);
      assignments.set(host, backend);
      continue;
    }
    draining.add(backend);
    if (!isWanted) ops.push({ kind: 'delete_map_entry', map: want.map, host, backend });
  }
  const free: string[] = [];
  // A slot no entry names that already holds exactly a route's servers (an add cut short before its map
  // entry, an entry deleted by hand): the route takes it back with its map entry alone.
  const strays = new Map<string, string>();
  for (const s of slots.values()) {
    if (held.has(s.name) || draining.has(s.name)) continue;
    if (s.servers.length === 0) free.push(s.name);
    else strays.set(serversKey(s.servers), s.name);
  }

  guardSlots(want, slots, ops);
  const size = slots.size;
  const unplaced = want.routes.length - assignments.size;
  const mustGrow = unplaced > free.length;
  // Slots draining in this plan are not free: when they leave too few, the pool grows past them too, or
  // some routes would wait for the next plan although this one reloads anyway.
  const short = size + unplaced - free.length;
  const target = Math.max(poolSize(size, want.routes.length, want.minSlots), mustGrow ? short : 0);
  const growing = target > size && (grow === 'ahead' || mustGrow);
  const created = growing ? createSlots(want, takenNames(current.backends), target - size, ops) : [];
  free.push(...created);

  let nextFree = 0;
  for (const route of want.routes) {
    const kept = assignments.get(route.host);
    if (kept !== undefined) {
      planServers(kept, route.servers, slots.get(kept)?.servers ?? [], ops);
      continue;
    }
    const key = strays.size > 0 ? serversKey(route.servers) : '';
    const stray = strays.get(key);
    if (stray !== undefined) strays.delete(key);
    const slot = stray ?? free[nextFree++];
    if (slot === undefined) break; // only when the pool is at its maximum; the next plan tries again
    held.add(slot);
    assignments.set(route.host, slot);
    if (stray === undefined) planServers(slot, route.servers, [], ops);
    const previous = entries.get(route.host) ?? null;
    ops.push({
      kind: 'set_map_entry',
      map: want.map,
      host: route.host,
      backend: slot,
      previous,
      cluster: route.cluster,
    });
  }
  for (const s of slots.values()) {
    if (held.has(s.name)) continue;
    for (const server of s.servers)
      if (server.owned) ops.push({ kind: 'delete_server', backend: s.name, server });
  }
  planAllowMap(want, current, slots, created, assignments, ops);
  const finalSize = size + created.length;
  return {
    map: want.map,
    size: finalSize,
    free: finalSize - held.size,
    growthDeferred: !growing && target > size,
    created: created.length,
    assignments,
  };
}

export function serversKey(
  servers: ReadonlyArray<{ address: string; port: number; check: boolean }>,
): string {
  return servers
    .map((s) => `${s.address}|${s.port}|${s.check}`)
    .sort()
    .join(',');
}

/**
 * Each slot's allow keys brought to what the route it serves after the plan wants (`allow.ts`), in slot
 * order, then keys naming no slot of ours removed.
 */
function planAllowMap(
  want: DesiredRouting,
  current: HaproxyState,
  slots: ReadonlyMap<string, BackendState>,
  created: readonly string[],
  assignments: ReadonlyMap<string, string>,
  ops: Operation[],
): void {
  const entries = current.maps?.find((m) => m.name === want.allowMap)?.entries;
  const input = { map: want.allowMap, dualStack: want.dualStack, current: keysBySlot(entries) };
  const routeBySlot = new Map<string, DesiredRoute>();
  if (want.routes.some((r) => r.networks.length > 0) || input.current.size > 0) {
    const byHost = new Map(want.routes.map((r) => [r.host, r]));
    for (const [host, slot] of assignments) {
      const route = byHost.get(host);
      if (route) routeBySlot.set(slot, route);
    }
  }
  for (const name of [...slots.keys(), ...created]) planSlotAllow(input, name, routeBySlot.get(name), ops);
  for (const [slot, keys] of input.current) {
    if (slots.has(slot)) continue;
    for (const key of keys) ops.push({ kind: 'delete_allow_entry', map: want.allowMap, key, stage: 'after' });
  }
}

/** Owned slot backends by name, in slot order. */
function slotsOf(prefix: string, backends: readonly BackendState[]): Map<string, BackendState> {
  const slots = new Map<string, BackendState>();
  let last = 0;
  let ordered = true;
  for (const b of backends) {
    if (!b.owned) continue;
    const n = slotNumber(prefix, b.name);
    if (n === undefined) continue;
    if (n < last) ordered = false;
    last = n;
    slots.set(b.name, b);
  }
  if (ordered) return slots;
  const byNumber = [...slots.values()].sort(
    (a, b) => (slotNumber(prefix, a.name) ?? 0) - (slotNumber(prefix, b.name) ?? 0),
  );
  return new Map(byNumber.map((b) => [b.name, b]));
}

/** Every proxy name a new slot must not take. */
function takenNames(backends: readonly BackendState[]): Set<string> {
  return new Set(backends.map((b) => b.name));
}

/** `count` new slot backends under names no proxy holds, lowest numbers first. */
function createSlots(want: DesiredRouting, taken: Set<string>, count: number, ops: Operation[]): string[] {
  const names: string[] = [];
  for (let n = 1; names.length < count; n++) {
    const name = slotName(want.slotPrefix, n);
    if (taken.has(name)) continue;
    taken.add(name);
    names.push(name);
    ops.push({ kind: 'create_backend', backend: slotSettings(want, name, want.balance) });
  }
  return names;
}

/** A slot backend's settings: its balance and its guard's own allow map. */
function slotSettings(want: DesiredRouting, name: string, balance: string) {
  return { name, balance, allowMap: slotAllowMapName(want.allowMap, name) };
}

/** Whether `slot` (an owned slot backend) guards itself as this release writes it. */
export function isGuarded(want: Pick<DesiredRouting, 'allowMap'>, slot: BackendState): boolean {
  return slot.allowMap === slotAllowMapName(want.allowMap, slot.name);
}

/**
 * Slots without their guard (an install from before per-slot allow maps, a hand edit) get it, servers kept:
 * written with the frontend's own change, in one reload.
 */
function guardSlots(want: DesiredRouting, slots: ReadonlyMap<string, BackendState>, ops: Operation[]): void {
  for (const s of slots.values()) {
    if (isGuarded(want, s)) continue;
    const to = slotSettings(want, s.name, s.balance);
    ops.push({
      kind: 'update_backend',
      backend: to,
      changes: [{ field: 'allow_map', from: s.allowMap ?? 'none', to: to.allowMap }],
    });
  }
}

/** Whether `name` is one of the pool's slot backends (for the planner's "keep these backends"). */
export function isSlot(want: DesiredRouting, name: string): boolean {
  return slotNumber(want.slotPrefix, name) !== undefined;
}
