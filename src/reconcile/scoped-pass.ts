import type { DesiredRouting, RawState } from '../haproxy/model.js';
import { desiredShape, renderRoute } from '../haproxy/render.js';
import type { ClusterRecord } from '../model/cluster.js';
import type { Plan, PoolReport } from '../plan/operations.js';
import type { RoutingIndexCache } from '../plan/routing-index.js';
import { planScoped } from '../plan/scoped.js';
import { errorText } from '../providers/provider.js';
import { endpointKey } from '../routes/endpoint.js';
import { compareStrings, type Route } from '../routes/route.js';
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
  let raw: RawState;
  try {
    const endRead = phase(i.metrics, 'read');
    raw = await i.provider.readState(i.signal, { fresh: false });
    endRead();
  } catch (err) {
    return failed(i, scope.clusters, err);
  }
  const endPlan = phase(i.metrics, 'plan');
  const shape = desiredShape(i.render);
  const routing = shape.routing as DesiredRouting;
  const planned = planScoped({
    index: i.indexes.for(raw, i.provider.registry, shape),
    routing,
    hosts: [...scope.hosts].sort(compareStrings),
    routeAt: (host) => {
      const route = memo.routeAt(host);
      return route && renderRoute(route, i.render);
    },
    totalRoutes: memo.routeCount,
    grow: i.kind.grow,
  });
  endPlan();
  if (!planned.plan) return { doubt: planned.doubt };
  const p = planned.plan;
  for (const c of p.conflicts) i.logger.warn({ conflict: c.kind, object: c.name }, c.detail);
  if (p.operations.length > 0) {
    try {
      await applyPlan(i, p, raw, i.kind);
    } catch (err) {
      // A full pass reads again and plans everything: what it does is what a conflict needs.
      if (failureKind(err) === 'conflict') return { doubt: `HAProxy changed meanwhile: ${errorText(err)}` };
      return failed(i, scope.clusters, err);
    }
  }
  const result = merged(i, memo, scope.clusters, p);
  const touched = touchedBy(p, memo, scope.hosts);
  return { result, clusters: scope.clusters, changed: p.operations.length > 0, touched, ...poolOf(p) };
}

/**
 * The changed clusters, and every cluster and host a change reaches: the hosts a cluster held, claims or
 * is handed, and the clusters that held or claim those hosts (whose route or rejection may follow).
 */
function scopeOf(
  i: ScopedPassInputs,
  memo: DesiredRoutesMemo,
): { clusters: Set<string>; hosts: Set<string> } | { doubt: string } {
  const clusters = new Set<string>();
  const hosts = new Set<string>();
  const queue = [...i.clusters];
  while (queue.length > 0) {
    const name = queue.pop() as string;
    if (clusters.has(name)) continue;
    if (clusters.size >= MAX_SCOPE) return { doubt: `the change reaches more than ${MAX_SCOPE} clusters` };
    clusters.add(name);
    const record = i.record(name);
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
  return { clusters, hosts };
}

/** The last result with these clusters as the memo and the plan now have them (its maps taken over). */
function merged(i: ScopedPassInputs, memo: DesiredRoutesMemo, clusters: Set<string>, p: Plan): PassResult {
  const { error: _error, ...r } = i.last;
  const backends = r.backends ?? new Map();
  for (const name of clusters) {
    const route = refresh(r, name, i.record(name), memo);
    const backend = route && p.pool?.assignments.get(route.host);
    if (route && backend !== undefined)
      backends.set(name, { host: route.host, backend, servers: route.endpoints.map(endpointKey) });
    else backends.delete(name);
  }
  return { ...r, ok: true, backends };
}

/** A failed pass: these clusters as planned, everything routed as before, every status an error. */
function failed(i: ScopedPassInputs, clusters: Set<string>, err: unknown): ScopedPassReport {
  const error = errorText(err);
  const failure = failureKind(err);
  i.logger.error({ err: error, failure }, 'reconcile failed');
  const memo = desiredMemo(i.topology);
  for (const name of clusters) refresh(i.last, name, i.record(name), memo);
  return { result: { ...i.last, ok: false, error }, clusters, changed: false, touched: new Set(), failure };
}

/** One cluster's entries of a result, as the memo has it now; its route, when it holds its host. */
function refresh(
  r: PassResult,
  name: string,
  record: ClusterRecord | undefined,
  memo: DesiredRoutesMemo,
): Route | undefined {
  r.seen.delete(name);
  const before = r.routes.get(name);
  if (before && r.holders.get(before.host) === name) r.holders.delete(before.host);
  r.routes.delete(name);
  r.rejected.delete(name);
  r.problems.delete(name);
  r.conflicted.delete(name);
  if (record) r.seen.set(name, record.updatedAt);
  const { route, rejected, problem } = memo.lookup(name);
  if (route) {
    r.routes.set(name, route);
    r.holders.set(route.host, name);
  }
  if (rejected) r.rejected.set(name, rejected);
  if (problem) r.problems.set(name, problem);
  return route;
}

/** Clusters whose map entry or slot servers the plan changes. */
function touchedBy(p: Plan, memo: DesiredRoutesMemo, hosts: ReadonlySet<string>): Set<string> {
  const bySlot = new Map<string, string>();
  for (const host of hosts) {
    const slot = p.pool?.assignments.get(host);
    const cluster = memo.routeAt(host)?.cluster;
    if (slot !== undefined && cluster !== undefined) bySlot.set(slot, cluster);
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
