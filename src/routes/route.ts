import { compareEndpoints, type Endpoint, endpointKey, validateEndpoint } from './endpoint.js';
import { type HostRejection, validateHost } from './host.js';

/** A cluster's wish to be reachable at `host` (its `control_plane_host`), as the source hands it over. */
export interface RouteClaim {
  /** Unique cluster id, as kubebyon-api names it. */
  cluster: string;
  host: string;
  endpoints: Endpoint[];
  /** When this cluster first claimed this host (ms since epoch): the older claim wins a host. */
  claimedAt: number;
}

/** A validated route: the only shape the renderer accepts. */
export interface Route {
  cluster: string;
  host: string;
  /** Sorted and de-duplicated. */
  endpoints: Endpoint[];
}

export type RouteRejection =
  | HostRejection
  | 'cluster_name_invalid'
  | 'host_claimed_by_other_cluster'
  | 'endpoint_address_invalid'
  | 'endpoint_port_invalid';

export interface RejectedRoute {
  cluster: string;
  reason: RouteRejection;
  detail: string;
}

export interface ResolvedRoutes {
  /** Sorted by host, so that everything rendered from them has a stable order. */
  routes: Route[];
  rejected: RejectedRoute[];
  /** Accepted routes with no endpoint: kept (their backend closes connections) but reported. */
  degraded: string[];
}

const CLUSTER_NAME = /^[A-Za-z0-9](?:[A-Za-z0-9._-]{0,251}[A-Za-z0-9])?$/;

export function validateClusterName(name: string): { ok: true } | { ok: false; detail: string } {
  return CLUSTER_NAME.test(name)
    ? { ok: true }
    : {
        ok: false,
        detail:
          'cluster name must be 1-253 letters, digits, dots, hyphens or underscores, starting and ending alphanumeric',
      };
}

/**
 * Turns claims into routes: each claim is validated on its own, then hosts are handed out
 * first-come-first-served (older `claimedAt` wins; ties go to the smaller cluster id so the result
 * never depends on input order).
 */
export function resolveRoutes(claims: readonly RouteClaim[]): ResolvedRoutes {
  const rejected: RejectedRoute[] = [];
  const valid: Array<{ claim: RouteClaim; route: Route }> = [];

  for (const claim of claims) {
    const name = validateClusterName(claim.cluster);
    if (!name.ok) {
      rejected.push({ cluster: claim.cluster, reason: 'cluster_name_invalid', detail: name.detail });
      continue;
    }
    const host = validateHost(claim.host);
    if (!host.ok) {
      rejected.push({ cluster: claim.cluster, reason: host.reason, detail: host.detail });
      continue;
    }
    const endpoints = new Map<string, Endpoint>();
    let endpointError: RejectedRoute | undefined;
    for (const e of claim.endpoints) {
      const checked = validateEndpoint(e.address, e.port);
      if (!checked.ok) {
        endpointError = { cluster: claim.cluster, reason: checked.reason, detail: checked.detail };
        break;
      }
      endpoints.set(endpointKey(checked.endpoint), checked.endpoint);
    }
    if (endpointError) {
      rejected.push(endpointError);
      continue;
    }
    valid.push({
      claim,
      route: {
        cluster: claim.cluster,
        host: host.host,
        endpoints: [...endpoints.values()].sort(compareEndpoints),
      },
    });
  }

  valid.sort(
    (a, b) => a.claim.claimedAt - b.claim.claimedAt || compareStrings(a.claim.cluster, b.claim.cluster),
  );
  const owners = new Map<string, string>();
  const routes: Route[] = [];
  for (const { route } of valid) {
    const owner = owners.get(route.host);
    if (owner !== undefined) {
      rejected.push({
        cluster: route.cluster,
        reason: 'host_claimed_by_other_cluster',
        detail: `host ${route.host} is already routed to cluster ${owner}`,
      });
      continue;
    }
    owners.set(route.host, route.cluster);
    routes.push(route);
  }

  routes.sort((a, b) => compareStrings(a.host, b.host));
  rejected.sort((a, b) => compareStrings(a.cluster, b.cluster));
  const degraded = routes.filter((r) => r.endpoints.length === 0).map((r) => r.cluster);
  return { routes, rejected, degraded };
}

export function compareStrings(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}
