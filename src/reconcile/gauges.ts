import type { Metrics } from '../metrics/metrics.js';
import type { PoolReport } from '../plan/operations.js';
import { CLUSTER_STATES, type ClusterStatus, type PassResult } from './status.js';

/**
 * The gauges a pass leaves behind: clusters by state, rejected routes by reason, which backend serves each
 * routed cluster, and the slot pool. Each is reset first, so a deleted cluster's series goes with it.
 */
export function publishGauges(
  metrics: Metrics,
  statuses: readonly ClusterStatus[],
  last: PassResult | undefined,
  pool: PoolReport | undefined,
): void {
  metrics.routes.reset();
  for (const state of CLUSTER_STATES) {
    metrics.routes.set({ state }, statuses.filter((s) => s.state === state).length);
  }
  metrics.rejectedRoutes.reset();
  const reasons = new Map<string, number>();
  for (const r of last?.desired.rejected ?? []) reasons.set(r.reason, (reasons.get(r.reason) ?? 0) + 1);
  const conflicts = last?.conflicted.size ?? 0;
  if (conflicts > 0) reasons.set('backend_not_owned', conflicts);
  for (const [reason, count] of reasons) metrics.rejectedRoutes.set({ reason }, count);
  metrics.routeBackendInfo.reset();
  for (const [cluster, { host, backend }] of last?.backends ?? [])
    metrics.routeBackendInfo.set({ cluster, host, backend }, 1);
  metrics.slotPoolSize.set(pool?.size ?? 0);
  metrics.slotPoolFree.set(pool?.free ?? 0);
}
