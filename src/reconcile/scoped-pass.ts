import type { DesiredRoute } from '../haproxy/model.js';
import { desiredShape, renderRoute } from '../haproxy/render.js';
import type { ClusterRecord } from '../model/cluster.js';
import { errorText } from '../model/errors.js';
import type { Plan, PoolReport } from '../plan/operations.js';
import type { Reading } from '../plan/reading.js';
import type { RoutingIndexCache } from '../plan/routing-index.js';
import { planScoped } from '../plan/scoped.js';
import { endpointKey } from '../routes/endpoint.js';
import { compareStrings, type RejectedRoute, type Route } from '../routes/route.js';
import type { TopologyProblem } from '../topology/topology.js';
import { type DesiredRoutesMemo, desiredMemo } from './desired.js';
import { applyPlan, type FailureKind, failureKind, type PassInputs, phase } from './pass.js';
import type { PassResult } from './status.js';

/** A change reaching more clusters than this (through the hosts they share) is left to a full pass. */
const MAX_SCOPE = 256;

export interface ScopedPassInputs extends Omit<PassInputs, 'records' | 'retries' | 'kind'> {
  kind: NonNullable<PassInputs['kind']>;
  /** The clusters the webhooks changed. */
  clusters: ReadonlySet<string>;
  record(name: string): ClusterRecord | undefined;
  /** The last pass's result (a successful one): the scoped pass takes over its maps. */
  last: PassResult;
  indexes: RoutingIndexCache;
}

export interface ScopedPassReport {
  result: PassResult;
  /** Every cluster whose status the pass may have changed. */
  clusters: Set<string>;
  changed: boolean;
  touched: Set<string>;
  failure?: FailureKind;
  pool?: PoolReport;
}

/**
 * A pass for a few changed clusters (map routing, a cached read): desired routes for those clusters only,
 * the hosts they hold or held planned against the routing index (`planScoped`), and the last result changed
 * for those clusters only; O(clusters) where a full pass is O(N). Whenever the result could differ from a
 * full pass's (the topology moved, the change reaches many clusters, the scoped planner has a doubt,
 * HAProxy changed meanwhile), it answers why instead, having applied nothing: the caller runs a full pass.
 */
export async function runScopedPass(i: ScopedPassInputs): Promise<ScopedPassReport | { doubt: string }> {
  const memo = desiredMemo(i.topology);
  if (!memo.current()) return { doubt: 'the topology moved since the last pass' };
  const endRender = phase(i.metrics, 'render');
  const scope = scopeOf(i, memo);
  endRender();
  if ('doubt' in scope) return scope;
  // The kept reading as it is: an apply compares the revision before it writes, and a plan of nothing is
  // confirmed below. Without one kept, a read (and its look at the revision) as before.
  const kept = i.provider.keptReading();
  let reading: Reading;
  try {
    const endRead = phase(i.metrics, 'read');
    reading = kept ?? (await i.provider.read(i.signal, { fresh: false }));
    endRead();
  } catch (err) {
    return failed(i, scope, err);
  }
  const endPlan = phase(i.metrics, 'plan');
  const shape = desiredShape(i.render);
  const planned = planScoped({
    index: i.indexes.for(reading, shape),
    routing: shape.routing,
    hosts: [...scope.hosts.keys()].sort(compareStrings),
    routeAt: (host) => scope.hosts.get(host),
    totalRoutes: scope.totalRoutes,
    grow: i.kind.grow,
  });
  endPlan();
  if (!planned.plan) return { doubt: planned.doubt };
  const p = planned.plan;
  for (const c of p.conflicts) i.logger.warn({ conflict: c.kind, object: c.name }, c.detail);
  if (p.operations.length > 0) {
    try {
      await applyPlan(i, p, reading, i.kind);
    } catch (err) {
      // A full pass reads again and plans everything: what it does is what a conflict needs.
      if (failureKind(err) === 'conflict') return { doubt: `HAProxy changed meanwhile: ${errorText(err)}` };
      return failed(i, scope, err);
    }
  } else if (kept) {
    // Nothing to do only if HAProxy still runs what was kept (a reload by anyone may have dropped a route).
    try {
      if (!(await i.provider.isCurrent(reading, i.signal)))
        return { doubt: 'HAProxy changed since the last pass' };
    } catch (err) {
      return failed(i, scope, err);
    }
  }
  const changed = p.operations.length > 0;
  const touched = touchedBy(p, scope);
  return { result: merged(i.last, scope, p), clusters: scope.names, changed, touched, ...poolOf(p) };
}

/** One cluster as the pass planned it: its record, its route when it holds its host, why not. */
interface Planned {
  record: ClusterRecord | undefined;
  route?: Route;
  rejected?: RejectedRoute;
  problem?: TopologyProblem;
}

/** What a scoped pass plans, taken at its start (the store and the memo may move on while it awaits). */
interface Scope {
  names: Set<string>;
  clusters: Map<string, Planned>;
  /** Each host's desired route, rendered (undefined: the host is to be routed nowhere). */
  hosts: Map<string, DesiredRoute | undefined>;
  totalRoutes: number;
}

/**
 * The changed clusters, and every cluster and host a change reaches: the hosts a cluster held, claims or
 * is handed, and the clusters that held or claim those hosts (whose route or rejection may follow).
 */
function scopeOf(i: ScopedPassInputs, memo: DesiredRoutesMemo): Scope | { doubt: string } {
  const records = new Map<string, ClusterRecord | undefined>();
  const hosts = new Set<string>();
  const queue = [...i.clusters];
  while (queue.length > 0) {
    const name = queue.pop() as string;
    if (records.has(name)) continue;
    if (records.size >= MAX_SCOPE) return { doubt: `the change reaches more than ${MAX_SCOPE} clusters` };
    const record = i.record(name);
    records.set(name, record);
    const handedOut = memo.update(new Map([[name, record]]));
    const reached = [
      i.last.routes.get(name)?.host,
      record?.host,
      memo.lookup(name).route?.host,
      ...handedOut,
    ];
    for (const host of reached) {
      if (host === undefined || hosts.has(host)) continue;
      hosts.add(host);
      const holder = i.last.holders.get(host);
      if (holder !== undefined) queue.push(holder);
      queue.push(...memo.claimantsOf(host));
    }
  }
  const clusters = new Map([...records].map(([name, record]) => [name, { record, ...memo.lookup(name) }]));
  const wanted = new Map<string, DesiredRoute | undefined>();
  for (const host of hosts) {
    const route = memo.routeAt(host);
    wanted.set(host, route && renderRoute(route, i.render));
  }
  return { names: new Set(records.keys()), clusters, hosts: wanted, totalRoutes: memo.routeCount };
}

/** The last result with the scope's clusters as planned (its maps taken over). */
function merged(last: PassResult, scope: Scope, p: Plan): PassResult {
  const { error: _error, ...r } = last;
  const backends = r.backends ?? new Map();
  for (const [name, planned] of scope.clusters) {
    refresh(r, name, planned);
    const route = planned.route;
    const backend = route && p.pool?.assignments.get(route.host);
    if (route && backend !== undefined)
      backends.set(name, { host: route.host, backend, servers: route.endpoints.map(endpointKey) });
    else backends.delete(name);
  }
  return { ...r, ok: true, backends };
}

/** A failed pass: the scope's clusters as planned, everything routed as before, every status an error. */
function failed(i: ScopedPassInputs, scope: Scope, err: unknown): ScopedPassReport {
  const error = errorText(err);
  const failure = failureKind(err);
  i.logger.error({ err: error, failure }, 'reconcile failed');
  for (const [name, planned] of scope.clusters) refresh(i.last, name, planned);
  const result = { ...i.last, ok: false, error };
  return { result, clusters: scope.names, changed: false, touched: new Set(), failure };
}

/** One cluster's entries of a result, as planned (its backend is the caller's: HAProxy may still run it). */
function refresh(r: PassResult, name: string, planned: Planned): void {
  const before = r.routes.get(name);
  if (before && r.holders.get(before.host) === name) r.holders.delete(before.host);
  for (const map of [r.seen, r.routes, r.rejected, r.problems]) map.delete(name);
  const { record, route, rejected, problem } = planned;
  if (record) r.seen.set(name, record.updatedAt);
  if (route) {
    r.routes.set(name, route);
    r.holders.set(route.host, name);
  }
  if (rejected) r.rejected.set(name, rejected);
  if (problem) r.problems.set(name, problem);
}

/** Clusters whose map entry or slot servers the plan changes. */
function touchedBy(p: Plan, scope: Scope): Set<string> {
  const bySlot = new Map<string, string>();
  for (const [host, route] of scope.hosts) {
    const slot = p.pool?.assignments.get(host);
    if (slot !== undefined && route) bySlot.set(slot, route.cluster);
  }
  const touched = new Set<string>();
  for (const op of p.operations) {
    const cluster =
      op.kind === 'set_map_entry'
        ? op.cluster
        : op.kind === 'create_server' || op.kind === 'update_server' || op.kind === 'delete_server'
          ? bySlot.get(op.backend)
          : undefined;
    if (cluster !== undefined) touched.add(cluster);
  }
  return touched;
}

const poolOf = (p: Plan) => (p.pool ? { pool: p.pool } : {});
