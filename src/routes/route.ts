import { compareEndpoints, type Endpoint, endpointKey, validateEndpoint } from './endpoint.js';
import { type HostRejection, validateHost } from './host.js';
import { type NetworkRejection, validateNetworks } from './networks.js';

/** A cluster's wish to be reachable at `host` (its `control_plane_host`), as the source hands it over. */
export interface RouteClaim {
  /** Unique cluster id, as kubebyon-api names it. */
  cluster: string;
  host: string;
  endpoints: Endpoint[];
  /** When this cluster first claimed this host (ms since epoch): the older claim wins a host. */
  claimedAt: number;
  /** Who may reach it (`src/routes/networks.ts`); absent or empty: everyone. */
  networks?: readonly string[] | undefined;
}

/** A validated route: the only shape the renderer accepts. */
export interface Route {
  cluster: string;
  host: string;
  /** Sorted and de-duplicated. */
  endpoints: Endpoint[];
  /** Canonical, sorted authorized networks; empty: open to all. */
  networks: readonly string[];
}

export type RouteRejection =
  | HostRejection
  | NetworkRejection
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
    const checked = validateClaim(claim);
    if (checked.ok) valid.push({ claim, route: checked.route });
    else rejected.push(checked.rejected);
  }
  valid.sort((a, b) => olderClaim(a.claim, b.claim));
  const owners = new Map<string, string>();
  const routes: Route[] = [];
  for (const { route } of valid) {
    const owner = owners.get(route.host);
    if (owner !== undefined) {
      rejected.push(hostTaken(route, owner));
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

/** One claim checked on its own: its route, or why it has none (before hosts are handed out). */
export function validateClaim(
  claim: RouteClaim,
): { ok: true; route: Route } | { ok: false; rejected: RejectedRoute } {
  const name = validateClusterName(claim.cluster);
  if (!name.ok)
    return {
      ok: false,
      rejected: { cluster: claim.cluster, reason: 'cluster_name_invalid', detail: name.detail },
    };
  const host = validateHost(claim.host);
  if (!host.ok)
    return { ok: false, rejected: { cluster: claim.cluster, reason: host.reason, detail: host.detail } };
  const endpoints = new Map<string, Endpoint>();
  for (const e of claim.endpoints) {
    const checked = validateEndpoint(e.address, e.port);
    if (!checked.ok)
      return {
        ok: false,
        rejected: { cluster: claim.cluster, reason: checked.reason, detail: checked.detail },
      };
    endpoints.set(endpointKey(checked.endpoint), checked.endpoint);
  }
  const networks = validateNetworks(claim.networks ?? []);
  if (!networks.ok)
    return {
      ok: false,
      rejected: { cluster: claim.cluster, reason: networks.reason, detail: networks.detail },
    };
  const route = {
    cluster: claim.cluster,
    host: host.host,
    endpoints: [...endpoints.values()].sort(compareEndpoints),
    networks: networks.networks.length === 0 ? NO_NETWORKS : networks.networks,
  };
  return { ok: true, route };
}

const NO_NETWORKS: readonly string[] = [];

/** The order in which claims get a host: older first, ties to the smaller cluster id. */
export function olderClaim(
  a: Pick<RouteClaim, 'claimedAt' | 'cluster'>,
  b: Pick<RouteClaim, 'claimedAt' | 'cluster'>,
) {
  return a.claimedAt - b.claimedAt || compareStrings(a.cluster, b.cluster);
}

export function hostTaken(route: Route, owner: string): RejectedRoute {
  return {
    cluster: route.cluster,
    reason: 'host_claimed_by_other_cluster',
    detail: `host ${route.host} is already routed to cluster ${owner}`,
  };
}

export function compareStrings(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}
