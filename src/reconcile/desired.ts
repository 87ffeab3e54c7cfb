import type { ClusterRecord } from '../model/cluster.js';
import {
  compareStrings,
  hostTaken,
  olderClaim,
  type RejectedRoute,
  type ResolvedRoutes,
  type Route,
  type RouteClaim,
  resolveRoutes,
  validateClaim,
} from '../routes/route.js';
import type { Topology, TopologyProblem } from '../topology/topology.js';

export interface DesiredRoutes extends ResolvedRoutes {
  /** Clusters whose endpoints the topology could not fully resolve, with why. */
  topologyProblems: Map<string, TopologyProblem>;
}

/** Joins what kubebyon-api asked for with what the topology knows into validated routes. Pure. */
export function desiredRoutes(records: readonly ClusterRecord[], topology: Topology): DesiredRoutes {
  const topologyProblems = new Map<string, TopologyProblem>();
  const claims: RouteClaim[] = records.map((record) => {
    const { claim, problem } = claimOf(record, topology);
    if (problem) topologyProblems.set(record.name, problem);
    return claim;
  });
  return { ...resolveRoutes(claims), topologyProblems };
}

function claimOf(
  record: ClusterRecord,
  topology: Topology,
): { claim: RouteClaim; problem?: TopologyProblem } {
  const answer = topology.endpointsFor(record.target);
  const claim = {
    cluster: record.name,
    host: record.host,
    endpoints: answer.endpoints,
    claimedAt: record.claimedAt,
    networks: record.authorizedNetworks,
  };
  return answer.problem ? { claim, problem: answer.problem } : { claim };
}

interface Checked {
  record: ClusterRecord;
  route?: Route;
  rejected?: RejectedRoute;
  problem?: TopologyProblem;
}

/**
 * `desiredRoutes` for one record set that changes a few records at a time: the same answer, but a record is
 * validated again only when it is a new object or the topology's revision moved, and hosts are handed out
 * again only where a changed record held or claims one. A topology without a revision is read afresh each
 * time. Each answer is new (arrays copied, then patched): an earlier answer never changes under its holder.
 */
export class DesiredRoutesMemo {
  private revision: number | undefined;
  private checked = new Map<string, Checked>();
  /** Valid claims by host: who may hold it. */
  private claimants = new Map<string, Set<string>>();
  private routes: Route[] = [];
  private rejected = new Map<string, RejectedRoute>();
  private problems = new Map<string, TopologyProblem>();
  private last: DesiredRoutes | undefined;
  private lastRecords: readonly ClusterRecord[] = [];
  /** `update` ran since the last answer: the next `routesFor` compares every record again. */
  private dirty = false;
  /** `routes` is the array of an answer already given: copied before it changes. */
  private shared = false;
  /** Records validated again by the last call (for tests and the bench). */
  revalidated = 0;

  constructor(private readonly topology: Topology) {}

  routesFor(records: readonly ClusterRecord[]): DesiredRoutes {
    const revision = this.topology.revision?.();
    this.revalidated = 0;
    if (revision === undefined || revision !== this.revision || this.last === undefined) {
      this.rebuild(records, revision);
    } else if (this.dirty || !sameObjects(records, this.lastRecords)) {
      this.patch(records);
    } else return this.last;
    this.lastRecords = records;
    this.dirty = false;
    this.shared = true;
    const degraded = this.routes.filter((r) => r.endpoints.length === 0).map((r) => r.cluster);
    const rejected = [...this.rejected.values()].sort((a, b) => compareStrings(a.cluster, b.cluster));
    this.last = { routes: this.routes, rejected, degraded, topologyProblems: new Map(this.problems) };
    return this.last;
  }

  /** Whether the answers kept hold for the topology as it is now (a revision that has not moved). */
  current(): boolean {
    const revision = this.topology.revision?.();
    return revision !== undefined && revision === this.revision && this.last !== undefined;
  }

  /**
   * Brings some clusters up to date (a record, or undefined for a deleted one) as `routesFor` would with the
   * whole record set, in O(clusters) (and a copy of the routes array once per answer given): returns the
   * hosts handed out again. A pass that plans only these clusters reads the routes off `routeAt`/`lookup`.
   */
  update(changes: ReadonlyMap<string, ClusterRecord | undefined>): Set<string> {
    const hosts = new Set<string>();
    for (const [name, record] of changes) {
      const before = this.checked.get(name);
      if (before?.record === record) continue;
      this.dirty = true;
      if (before) this.forget(before, hosts);
      if (!record) continue;
      const now = this.check(record);
      if (now.route) hosts.add(now.route.host);
    }
    if (hosts.size === 0) return hosts;
    if (this.shared) this.routes = this.routes.slice();
    this.shared = false;
    for (const host of hosts) this.handOut(host);
    return hosts;
  }

  /** The route that holds `host`, if any. */
  routeAt(host: string): Route | undefined {
    const route = this.routes[lowerBound(this.routes, host)];
    return route?.host === host ? route : undefined;
  }

  /** A cluster as the memo knows it: its route if it holds its host, its rejection, its topology problem. */
  lookup(name: string): { route?: Route; rejected?: RejectedRoute; problem?: TopologyProblem } {
    const c = this.checked.get(name);
    if (!c) return {};
    const route = c.route && this.routeAt(c.route.host)?.cluster === name ? c.route : undefined;
    const rejected = this.rejected.get(name);
    return {
      ...(route ? { route } : {}),
      ...(rejected ? { rejected } : {}),
      ...(c.problem ? { problem: c.problem } : {}),
    };
  }

  /** Clusters with a valid claim on `host` (its holder among them). */
  claimantsOf(host: string): ReadonlySet<string> {
    return this.claimants.get(host) ?? new Set();
  }

  /** The host a cluster's record claims, if the memo has checked it. */
  hostOf(name: string): string | undefined {
    return this.checked.get(name)?.record.host;
  }

  get routeCount(): number {
    return this.routes.length;
  }

  private rebuild(records: readonly ClusterRecord[], revision: number | undefined): void {
    this.revision = revision;
    this.checked.clear();
    this.claimants.clear();
    this.problems.clear();
    this.rejected.clear();
    for (const record of records) this.check(record);
    // Hosts handed out as resolveRoutes does, from the claims just checked.
    const valid = [...this.checked.values()].filter((c) => c.route !== undefined);
    valid.sort((a, b) => olderClaim(claimOrder(a), claimOrder(b)));
    const owners = new Map<string, string>();
    const routes: Route[] = [];
    for (const c of valid) {
      const route = c.route as Route;
      const owner = owners.get(route.host);
      if (owner !== undefined) this.rejected.set(c.record.name, hostTaken(route, owner));
      else {
        owners.set(route.host, route.cluster);
        routes.push(route);
      }
    }
    this.routes = routes.sort((a, b) => compareStrings(a.host, b.host));
  }

  private patch(records: readonly ClusterRecord[]): void {
    const seen = new Set<string>();
    const hosts = new Set<string>();
    for (const record of records) {
      seen.add(record.name);
      const before = this.checked.get(record.name);
      if (before?.record === record) continue;
      if (before) this.forget(before, hosts);
      const now = this.check(record);
      if (now.route) hosts.add(now.route.host);
    }
    for (const [name, before] of this.checked) if (!seen.has(name)) this.forget(before, hosts);
    this.routes = this.routes.slice();
    for (const host of hosts) this.handOut(host);
  }

  /** Validates one record (a new object) and files its claim. */
  private check(record: ClusterRecord): Checked {
    this.revalidated++;
    const { claim, problem } = claimOf(record, this.topology);
    const result = validateClaim(claim);
    const checked: Checked = { record, ...(problem ? { problem } : {}) };
    if (problem) this.problems.set(record.name, problem);
    if (result.ok) {
      checked.route = result.route;
      const names = this.claimants.get(result.route.host) ?? new Set<string>();
      this.claimants.set(result.route.host, names.add(record.name));
    } else {
      checked.rejected = result.rejected;
      this.rejected.set(record.name, result.rejected);
    }
    this.checked.set(record.name, checked);
    return checked;
  }

  /** Takes a record's claim back; the host it held is handed out again. */
  private forget(before: Checked, hosts: Set<string>): void {
    const name = before.record.name;
    this.checked.delete(name);
    this.problems.delete(name);
    this.rejected.delete(name);
    if (!before.route) return;
    hosts.add(before.route.host);
    const names = this.claimants.get(before.route.host);
    names?.delete(name);
    if (names?.size === 0) this.claimants.delete(before.route.host);
  }

  /** Gives `host` to its oldest valid claim and rejects the others, as `resolveRoutes` does. */
  private handOut(host: string): void {
    const i = lowerBound(this.routes, host);
    if (this.routes[i]?.host === host) this.routes.splice(i, 1);
    const claims = [...(this.claimants.get(host) ?? [])].map((n) => this.checked.get(n) as Checked);
    claims.sort((a, b) => olderClaim(claimOrder(a), claimOrder(b)));
    const [owner, ...others] = claims;
    if (!owner?.route) return;
    this.rejected.delete(owner.record.name);
    this.routes.splice(i, 0, owner.route);
    for (const c of others)
      if (c.route) this.rejected.set(c.record.name, hostTaken(c.route, owner.record.name));
  }
}

const claimOrder = (c: Checked) => ({ claimedAt: c.record.claimedAt, cluster: c.record.name });

function sameObjects<T>(a: readonly T[], b: readonly T[]): boolean {
  if (a === b) return true;
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

function lowerBound(routes: readonly Route[], host: string): number {
  let lo = 0;
  let hi = routes.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (compareStrings((routes[mid] as Route).host, host) < 0) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

const memos = new WeakMap<Topology, DesiredRoutesMemo>();

/** The memo of a topology, shared by every pass over it. */
export function desiredMemo(topology: Topology): DesiredRoutesMemo {
  const memo = memos.get(topology) ?? new DesiredRoutesMemo(topology);
  memos.set(topology, memo);
  return memo;
}

/** `desiredRoutes`, remembered per topology between passes (see `DesiredRoutesMemo`). */
export function memoizedDesiredRoutes(records: readonly ClusterRecord[], topology: Topology): DesiredRoutes {
  return desiredMemo(topology).routesFor(records);
}
