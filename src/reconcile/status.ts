import type { ClusterRecord } from '../model/cluster.js';
import type { RejectedRoute, Route } from '../routes/route.js';
import type { TopologyProblem } from '../topology/topology.js';
import type { DesiredRoutes } from './desired.js';
import type { RouteBackend } from './routing.js';

export const CLUSTER_STATES = ['pending', 'applied', 'rejected', 'degraded', 'error'] as const;
export type ClusterState = (typeof CLUSTER_STATES)[number];

export interface ClusterStatus {
  name: string;
  host: string;
  /** Who may reach it, as stored (canonical, sorted); empty: open to all. */
  authorized_networks: readonly string[];
  api_endpoint: string | null;
  state: ClusterState;
  reason: string | null;
  last_applied_at: string | null;
  /** The HAProxy backend serving the host (a slot with map routing), or null while none does. */
  backend: string | null;
  /** That backend's servers, `address:port`. */
  servers: string[];
}

/**
 * The outcome of the last reconcile pass, as far as cluster status is concerned: by cluster, so that one
 * cluster's status costs a lookup. A pass that planned only some clusters (a scoped pass) takes over the
 * maps of the result before it and changes those clusters' entries (`mergeScoped`): a result is only read
 * until the next one replaces it.
 */
export interface PassResult {
  /** The version (`updatedAt`) of each cluster the pass planned from: a cluster stored since is still pending. */
  seen: Map<string, number>;
  ok: boolean;
  error?: string;
  /** Each cluster's route, when it holds its host. */
  routes: Map<string, Route>;
  /** Who holds each host: host -> cluster. */
  holders: Map<string, string>;
  rejected: Map<string, RejectedRoute>;
  /** Clusters whose endpoints the topology could not fully resolve, with why. */
  problems: Map<string, TopologyProblem>;
  /** Which backend serves each routed cluster after the pass (what HAProxy still runs, if it failed). */
  backends?: Map<string, RouteBackend>;
}

/** A full pass's result, indexed by cluster. */
export function passResult(
  desired: DesiredRoutes,
  fields: Pick<PassResult, 'seen' | 'ok' | 'backends' | 'error'>,
): PassResult {
  const { backends, error, ...rest } = fields;
  return {
    ...rest,
    ...(error !== undefined ? { error } : {}),
    ...(backends ? { backends } : {}),
    routes: new Map(desired.routes.map((r) => [r.cluster, r])),
    holders: new Map(desired.routes.map((r) => [r.host, r.cluster])),
    rejected: new Map(desired.rejected.map((r) => [r.cluster, r])),
    problems: new Map(desired.topologyProblems),
  };
}

/**
 * Each cluster's state for the API: rejected or degraded by validation and topology, applied once a pass that
 * saw its current version succeeded, error when that pass failed, pending until then. Pure.
 */
export function clusterStatuses(
  records: readonly ClusterRecord[],
  last: PassResult | undefined,
  appliedAt: ReadonlyMap<string, number>,
  publicPort: number,
): ClusterStatus[] {
  return records.map((record) => clusterStatus(record, last, appliedAt, publicPort));
}

/** One cluster's state (see `clusterStatuses`), in constant time once the pass's index is built. */
export function clusterStatus(
  record: ClusterRecord,
  last: PassResult | undefined,
  appliedAt: ReadonlyMap<string, number>,
  publicPort: number,
): ClusterStatus {
  const served = last?.backends?.get(record.name);
  const { state, reason, route } = verdict(record, last);
  return {
    name: record.name,
    host: record.host,
    authorized_networks: record.authorizedNetworks ?? OPEN,
    api_endpoint: route ? `https://${route.host}:${publicPort}` : null,
    last_applied_at: appliedAt.has(record.name)
      ? new Date(appliedAt.get(record.name) ?? 0).toISOString()
      : null,
    backend: served?.backend ?? null,
    servers: served?.servers ?? [],
    state,
    reason,
  };
}

const OPEN: readonly string[] = Object.freeze([]);

/** Only the state of `clusterStatus` (what the gauges count): no strings or dates made. */
export function clusterState(record: ClusterRecord, last: PassResult | undefined): ClusterState {
  return verdict(record, last).state;
}

function verdict(
  record: ClusterRecord,
  last: PassResult | undefined,
): { state: ClusterState; reason: string | null; route?: Route | undefined } {
  if (!last || last.seen.get(record.name) !== record.updatedAt) return { state: 'pending', reason: null };
  const rejection = last.rejected.get(record.name);
  if (rejection) return { state: 'rejected', reason: `${rejection.reason}: ${rejection.detail}` };
  if (!last.ok) return { state: 'error', reason: last.error ?? 'reconcile failed' };
  const route = last.routes.get(record.name);
  const problem = last.problems.get(record.name);
  if (problem || route?.endpoints.length === 0)
    return { state: 'degraded', reason: problem ?? 'no_endpoints', route };
  return { state: 'applied', reason: null, route };
}
