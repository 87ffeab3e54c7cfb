import type { DesiredRoute, DesiredRouting } from '../haproxy/model.js';
import { planSlotAllow } from './allow.js';
import type { Operation, Plan } from './operations.js';
import { planServers, sortOperations } from './plan.js';
import type { RoutingIndex, Slot } from './routing-index.js';
import { poolSize, serversKey } from './slots.js';

/** What a plan of a few hosts is made from. */
export interface ScopedInput {
  index: RoutingIndex;
  /** The desired routing settings; its `routes` are not read (see `routeAt`). */
  routing: Omit<DesiredRouting, 'routes'>;
  /** The hosts to plan, sorted as desired routes are (`compareStrings`), each once. */
  hosts: readonly string[];
  /** The desired route at a host, if any. */
  routeAt(host: string): DesiredRoute | undefined;
  /** How many routes the desired state has in all (the pool's size depends on it). */
  totalRoutes: number;
  grow: 'ahead' | 'when_needed';
}

export type ScopedPlan = { plan: Plan; doubt?: undefined } | { doubt: string; plan?: undefined };

/**
 * Map routing's plan for `hosts` only, in O(hosts): the operations the full planner (`plan`, `planRouting`)
 * makes for those hosts, in its order, when the rest of the state is as the desired state wants it. Where
 * that cannot be known from the hosts and the index alone, it says why (`doubt`) and plans nothing: the
 * structure would change, an entry names no slot of its own, a slot no entry names holds our servers, or
 * the pool must grow first (no free slot for a new host, or growth ahead of need is allowed). Pure.
 *
 * The same steps as `planRouting`: a wanted host keeps the slot its entry names; an unwanted host's entry
 * goes (in the map's order) and its slot drains; a new host takes a stray holding exactly its servers, else
 * the lowest free slot; drained slots lose their servers, in slot order.
 */
export function planScoped(i: ScopedInput): ScopedPlan {
  const x = i.index;
  const doubt = x.doubt;
  if (doubt) return { doubt };
  const map = i.routing.map;
  const ops: Operation[] = [];
  const kept = new Map<string, Slot>();
  const deleted: string[] = [];
  const draining: Slot[] = [];
  let unplaced = 0;
  for (const host of i.hosts) {
    const backend = x.entries.get(host);
    const slot = backend === undefined ? undefined : x.slots.get(backend);
    if (backend !== undefined && !slot) return { doubt: `the entry of ${host} names no slot` };
    const wanted = i.routeAt(host) !== undefined;
    if (wanted && slot) kept.set(host, slot);
    else if (wanted) unplaced++;
    else if (slot) {
      deleted.push(host);
      draining.push(slot);
    }
  }
  for (const host of x.inEntryOrder(deleted))
    ops.push({ kind: 'delete_map_entry', map, host, backend: x.entries.get(host) as string });

  const size = x.slots.size;
  if (unplaced > x.free.length) return { doubt: 'no free slot: the pool must grow' };
  const target = poolSize(size, i.totalRoutes, i.routing.minSlots);
  if (target > size && i.grow === 'ahead') return { doubt: 'the pool grows ahead of need' };

  const strays = strayMap(x);
  const assignments = new Map<string, string>();
  let nextFree = 0;
  for (const host of i.hosts) {
    const route = i.routeAt(host);
    if (!route) continue;
    const keep = kept.get(host);
    if (keep) {
      assignments.set(host, keep.name);
      planServers(keep.name, route.servers, x.servers(keep), ops);
      continue;
    }
    const key = strays.size > 0 ? serversKey(route.servers) : '';
    const stray = strays.get(key);
    if (stray !== undefined) strays.delete(key);
    const slot = stray ?? (x.free[nextFree++] as Slot).name;
    assignments.set(host, slot);
    if (stray === undefined) planServers(slot, route.servers, [], ops);
    const previous = x.entries.get(host) ?? null;
    ops.push({ kind: 'set_map_entry', map, host, backend: slot, previous, cluster: route.cluster });
  }
  draining.sort((a, b) => a.number - b.number);
  for (const slot of draining)
    for (const server of x.servers(slot))
      if (server.owned) ops.push({ kind: 'delete_server', backend: slot.name, server });
  planAllowOf(i, kept, draining, assignments, ops);

  // Every other named slot stays held; the drained ones are free from the next plan on.
  const held = x.named - new Set(draining).size + (assignments.size - kept.size);
  const pool = {
    map,
    size,
    free: size - held,
    growthDeferred: target > size,
    created: 0,
    assignments,
  };
  return { plan: { operations: sortOperations(ops), conflicts: [...x.conflicts], pool } };
}

/** The allow keys of every slot these hosts held or take, in slot order as the full planner goes. */
function planAllowOf(
  i: ScopedInput,
  kept: ReadonlyMap<string, Slot>,
  draining: readonly Slot[],
  assignments: ReadonlyMap<string, string>,
  ops: Operation[],
): void {
  const x = i.index;
  const routeBySlot = new Map<string, DesiredRoute>();
  for (const [host, slot] of assignments) {
    const route = i.routeAt(host);
    if (route) routeBySlot.set(slot, route);
  }
  const touched = new Set<Slot>([...kept.values(), ...draining]);
  for (const slot of routeBySlot.keys()) {
    const s = x.slots.get(slot);
    if (s) touched.add(s);
  }
  const input = { map: i.routing.allowMap, dualStack: i.routing.dualStack, current: x.allow };
  for (const slot of [...touched].sort((a, b) => a.number - b.number))
    planSlotAllow(input, slot.name, routeBySlot.get(slot.name), ops);
}

/** Strays by their servers, the last in slot order winning, as the full planner keys them. */
function strayMap(x: RoutingIndex): Map<string, string> {
  const byKey = new Map<string, string>();
  const strays = [...x.strays].sort((a, b) => a.number - b.number);
  for (const s of strays) byKey.set(serversKey(x.servers(s)), s.name);
  return byKey;
}
