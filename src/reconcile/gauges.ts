import type { Metrics } from '../metrics/metrics.js';
import type { PoolReport } from '../plan/operations.js';
import { CLUSTER_STATES, type ClusterState, type PassResult } from './status.js';

/** What one cluster adds to the gauges: its state, why its route is rejected, which backend serves it. */
interface Share {
  state?: ClusterState;
  reason?: string;
  info?: { cluster: string; host: string; backend: string };
}

/**
 * The gauges a pass leaves behind: clusters by state, rejected routes by reason, which backend serves each
 * routed cluster, and the slot pool. `all` brings them in line with every cluster (a deleted cluster's series
 * goes with it), touching only the series that differ; `some` changes only the clusters a scoped pass
 * planned, in O(those).
 */
export class Gauges {
  private readonly shares = new Map<string, Share>();
  private readonly states = new Map<ClusterState, number>();
  private readonly reasons = new Map<string, number>();

  constructor(private readonly metrics: Metrics) {}

  all(
    states: ReadonlyMap<string, ClusterState>,
    last: PassResult | undefined,
    pool: PoolReport | undefined,
  ): void {
    const names = new Set(states.keys());
    for (const name of last?.rejected.keys() ?? []) names.add(name);
    for (const name of last?.backends?.keys() ?? []) names.add(name);
    const changes = new Map<string, ClusterState | undefined>();
    for (const name of this.shares.keys()) if (!names.has(name)) changes.set(name, undefined);
    // Only the series that differ are touched: a full pass that changed nothing costs a comparison per
    // cluster, not a rebuild of every labelled series (tens of ms at thousands of clusters).
    for (const name of names) {
      const state = states.get(name);
      if (!sameShare(this.shares.get(name), shareOf(name, state, last))) changes.set(name, state);
    }
    this.some(changes, last, pool);
  }

  /** Only `changes` (a cluster's state now, undefined when it is gone): every other series stays. */
  some(
    changes: ReadonlyMap<string, ClusterState | undefined>,
    last: PassResult | undefined,
    pool: PoolReport | undefined,
  ): void {
    const reasons = new Set<string>();
    for (const [name, state] of changes) {
      const before = this.shares.get(name);
      if (before?.reason) reasons.add(before.reason);
      if (before) this.remove(name, before);
      const now = shareOf(name, state, last);
      if (now.reason) reasons.add(now.reason);
      this.add(name, now);
    }
    for (const state of CLUSTER_STATES) this.metrics.routes.set({ state }, this.states.get(state) ?? 0);
    for (const reason of reasons) {
      const count = this.reasons.get(reason) ?? 0;
      if (count > 0) this.metrics.rejectedRoutes.set({ reason }, count);
      else this.metrics.rejectedRoutes.remove({ reason });
    }
    this.setPool(pool);
  }

  private add(name: string, share: Share): void {
    if (!share.state && !share.reason && !share.info) return;
    this.shares.set(name, share);
    if (share.state) this.states.set(share.state, (this.states.get(share.state) ?? 0) + 1);
    if (share.reason) this.reasons.set(share.reason, (this.reasons.get(share.reason) ?? 0) + 1);
    if (share.info) this.metrics.routeBackendInfo.set(share.info, 1);
  }

  private remove(name: string, share: Share): void {
    this.shares.delete(name);
    if (share.state) this.states.set(share.state, (this.states.get(share.state) ?? 1) - 1);
    if (share.reason) this.reasons.set(share.reason, (this.reasons.get(share.reason) ?? 1) - 1);
    if (share.info) this.metrics.routeBackendInfo.remove(share.info);
  }

  private setPool(pool: PoolReport | undefined): void {
    this.metrics.slotPoolSize.set(pool?.size ?? 0);
    this.metrics.slotPoolFree.set(pool?.free ?? 0);
  }
}

function shareOf(name: string, state: ClusterState | undefined, last: PassResult | undefined): Share {
  const share: Share = {};
  if (state) share.state = state;
  const reason = last?.rejected.get(name)?.reason;
  if (reason) share.reason = reason;
  const served = last?.backends?.get(name);
  if (served) share.info = { cluster: name, host: served.host, backend: served.backend };
  return share;
}

function sameShare(a: Share | undefined, b: Share): boolean {
  if (!a) return !b.state && !b.reason && !b.info;
  return (
    a.state === b.state &&
    a.reason === b.reason &&
    a.info?.host === b.info?.host &&
    a.info?.backend === b.info?.backend &&
    (a.info === undefined) === (b.info === undefined)
  );
}
