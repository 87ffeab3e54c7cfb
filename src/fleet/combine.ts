import type { ClusterRecord } from '../model/cluster.js';
import type { PassOutcome } from '../reconcile/reconciler-options.js';
import type { ClusterState, ClusterStatus } from '../reconcile/status.js';
import type { InstanceState, PublishedStatus } from '../store/desired-store.js';

/**
 * Several HAProxy instances, one answer (pure): a cluster is `applied` only when every instance has it;
 * otherwise it takes the state of the instance furthest from that, and its reason names the instances
 * behind and why.
 */

export interface FleetStatus extends ClusterStatus {
  /** Each instance's state (several instances, or the status a leader published). */
  instances?: InstanceState[];
}

// The further from applied, the earlier: the cluster's state is that of its worst instance.
const SEVERITY: readonly ClusterState[] = ['rejected', 'error', 'pending', 'degraded', 'applied'];

/** One cluster's status from each instance's (in instance order); undefined when no instance knows it. */
export function combineStatuses(
  per: ReadonlyArray<{ instance: string; status: ClusterStatus | undefined }>,
): FleetStatus | undefined {
  const known = per.filter((p): p is { instance: string; status: ClusterStatus } => p.status !== undefined);
  const first = known[0];
  if (!first) return undefined;
  const worst = known.reduce((a, b) =>
    SEVERITY.indexOf(b.status.state) < SEVERITY.indexOf(a.status.state) ? b : a,
  );
  const behind = known.filter((p) => p.status.state !== 'applied');
  const instances = known.map(({ instance, status }) => ({
    name: instance,
    state: status.state,
    reason: status.reason,
    last_applied_at: status.last_applied_at,
  }));
  // The route is applied everywhere since the latest instance applied it.
  const appliedAt = known.map((p) => p.status.last_applied_at);
  return {
    ...first.status,
    api_endpoint: worst.status.api_endpoint ?? first.status.api_endpoint,
    state: worst.status.state,
    reason:
      behind.length === 0
        ? null
        : behind.map((p) => `${p.instance}: ${p.status.reason ?? p.status.state}`).join('; '),
    last_applied_at: appliedAt.includes(null) ? null : (appliedAt.sort().at(-1) ?? null),
    instances,
  };
}

/** Every instance's pass outcome as one: ok when all are, with the failures named by instance. */
export function combineOutcomes(per: ReadonlyArray<{ instance: string; outcome: PassOutcome }>): PassOutcome {
  const failed = per.filter((p) => !p.outcome.ok);
  const changed = per.some((p) => p.outcome.changed);
  if (failed.length === 0) return { ok: true, changed };
  return {
    ok: false,
    changed,
    error: failed.map((p) => `${p.instance}: ${p.outcome.error ?? 'failed'}`).join('; '),
  };
}

/** What a leader publishes for a cluster, from its status and the version it describes. */
export function toPublished(status: FleetStatus, record: ClusterRecord): PublishedStatus {
  return {
    state: status.state,
    reason: status.reason,
    api_endpoint: status.api_endpoint,
    last_applied_at: status.last_applied_at,
    observed: record.updatedAt,
    instances: status.instances ?? [],
  };
}

/**
 * A cluster's status on a replica that does not lead: what the leader published, if it describes the stored
 * version; pending until then. Which slot serves it is the leader's to say (`backend` null here).
 */
export function fromPublished(record: ClusterRecord, published: PublishedStatus | undefined): FleetStatus {
  const current = published !== undefined && published.observed === record.updatedAt;
  return {
    name: record.name,
    host: record.host,
    authorized_networks: record.authorizedNetworks ?? [],
    api_endpoint: current ? published.api_endpoint : null,
    state: current ? (published.state as ClusterState) : 'pending',
    reason: current ? published.reason : null,
    last_applied_at: current ? published.last_applied_at : null,
    backend: null,
    servers: [],
    ...(current && published.instances.length > 0 ? { instances: published.instances } : {}),
  };
}
