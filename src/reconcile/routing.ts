import type { DesiredConfig } from '../haproxy/model.js';
import type { ReloadReason } from '../metrics/metrics.js';
import type { Operation, Plan } from '../plan/plan.js';
import { endpointKey } from '../routes/endpoint.js';

/** Which backend serves a cluster's host, and the servers (`address:port`) it holds. */
export interface RouteBackend {
  host: string;
  backend: string;
  servers: string[];
}

/** Each routed cluster's backend once `p` is applied: the slot the plan placed its host in. Pure. */
export function routeBackends(config: DesiredConfig, p: Plan): Map<string, RouteBackend> {
  const out = new Map<string, RouteBackend>();
  const slots = p.pool?.assignments;
  for (const r of config.routing.routes) {
    const backend = slots?.get(r.host);
    if (backend !== undefined)
      out.set(r.cluster, { host: r.host, backend, servers: r.servers.map((e) => endpointKey(e)) });
  }
  return out;
}

/** What asked for a pass decides how it reads, whether it may grow the slot pool, and how its reload counts. */
export interface PassKind {
  /** Read everything HAProxy runs (`OwnedProvider.read(…, { fresh: true })`). */
  fresh: boolean;
  /** `ahead` only when no cluster change waits on the pass: a webhook never waits for a growth reload. */
  grow: 'ahead' | 'when_needed';
  /** Only a resync or a reload by someone else asked for it: what it changes is a repair. */
  repair: boolean;
}

// Passes no webhook waits on: they may grow the pool ahead of need.
const AHEAD = new Set(['start', 'resync', 'pool_growth']);
// HAProxy may have lost or changed what runs at runtime (a reload, a restart, an outage, a failed apply cut
// short): read it all.
const FRESH = new Set(['start', 'resync', 'haproxy_reloaded', 'provider_back', 'retry']);
const REPAIR = new Set(['resync', 'haproxy_reloaded']);

export function passKind(reasons: ReadonlySet<string>): PassKind {
  const all = (set: ReadonlySet<string>) => reasons.size > 0 && [...reasons].every((r) => set.has(r));
  return {
    fresh: [...reasons].some((r) => FRESH.has(r)),
    grow: all(AHEAD) ? 'ahead' : 'when_needed',
    repair: all(REPAIR),
  };
}

// Operations that change HAProxy's structure (a reload); servers and map entries change at runtime.
const STRUCTURE: ReadonlySet<Operation['kind']> = new Set([
  'create_frontend',
  'update_frontend',
  'delete_frontend',
  'create_backend',
  'delete_backend',
  'set_switching_rules',
]);

/**
 * Why a plan that reloaded did: `pool_growth` when its only structure changes are new slot backends,
 * `repair` when only a resync or a foreign reload asked for the pass, `structure` otherwise.
 */
export function reloadReason(p: Plan, repair: boolean): ReloadReason {
  const structure = p.operations.filter((op) => STRUCTURE.has(op.kind));
  const slotsOnly =
    (p.pool?.created ?? 0) > 0 &&
    structure.length > 0 &&
    structure.every((op) => op.kind === 'create_backend');
  if (slotsOnly) return 'pool_growth';
  return repair ? 'repair' : 'structure';
}
