import {
  allowMapNameFor,
  DEFAULT_PREFIX,
  refusalsBackendFor,
  slotPrefixFor,
  sniMapNameFor,
} from '../naming/names.js';
import { DEFAULT_OWNER_ID } from '../registry/registry.js';
import { compareStrings, type Route } from '../routes/route.js';
import { type Edge, isDualStack, type PerSource } from './edge.js';
import type { BalanceAlgorithm, Bind, DesiredConfig } from './model.js';

export interface RenderOptions {
  frontendName: string;
  bind: Bind;
  /** How long to wait for the TLS ClientHello that carries the SNI. */
  inspectDelayMs: number;
  /** An existing backend the service does not own, for SNI that matches no route; null closes those. */
  defaultBackend: string | null;
  namePrefix: string;
  /**
   * `leastconn` by default: API clients hold long-lived watch connections, so spreading by open
   * connections keeps nodes even where round-robin would pile streams onto whichever came first.
   */
  balance: BalanceAlgorithm;
  healthChecks: boolean;
  /** The SNI map's name; one per owner. */
  sniMap: string;
  /** The allow map's name (authorized networks); one per owner. */
  allowMap: string;
  /** Slot backends created before the first route needs one. */
  minSlots: number;
  /** The SNI frontend's `maxconn`; 0: not written. */
  maxConn: number;
  /** Per-source limits (`edge.ts`); 0 for both: no stick table. */
  perSource: PerSource;
}

/**
 * The slot pool never has fewer slots: 64 empty backends cost HAProxy about 256 KB and a first route no
 * reload; the pool grows ×1.5 once 7/8 is held, so N routes cost O(log N) growth reloads (8 to reach 1000
 * one route at a time; one when they come in one plan).
 */
export const MIN_SLOTS = 64;

/** The defaults the service runs with (KUBEBYON_HAPROXY_* unset). */
export const DEFAULT_RENDER_OPTIONS: RenderOptions = {
  frontendName: 'kubebyon_sni',
  bind: { address: '*', port: 443 },
  inspectDelayMs: 5000,
  defaultBackend: null,
  namePrefix: DEFAULT_PREFIX,
  balance: 'leastconn',
  healthChecks: true,
  sniMap: sniMapNameFor(DEFAULT_OWNER_ID),
  allowMap: allowMapNameFor(DEFAULT_OWNER_ID),
  minSlots: MIN_SLOTS,
  maxConn: 8000,
  perSource: { maxConn: 500, maxRate: 1000, tableSize: 100_000 },
};

/** Renders validated routes into the HAProxy objects the service should own. Pure: same input, same output. */
export function renderDesired(routes: readonly Route[], options: RenderOptions): DesiredConfig {
  // The same routes (the memoized desired state, unchanged since the last pass) render to the same config.
  const last = lastRendered.get(routes);
  if (last?.options === options) return last.config;
  const config = renderUncached(routes, options);
  lastRendered.set(routes, { options, config });
  return config;
}

const lastRendered = new WeakMap<readonly Route[], { options: RenderOptions; config: DesiredConfig }>();

/**
 * The frontend routes by one SNI map (one per owner), and the planner places each route in a slot backend
 * of the pool, so routes come and go at runtime without a reload.
 */
function renderUncached(routes: readonly Route[], options: RenderOptions): DesiredConfig {
  const sorted = sortedByHost(routes) ? routes : [...routes].sort((a, b) => compareStrings(a.host, b.host));
  return {
    frontend: {
      name: options.frontendName,
      bind: options.bind,
      inspectDelayMs: options.inspectDelayMs,
      defaultBackend: options.defaultBackend,
      sniMap: options.sniMap,
      edge: edgeOf(options),
    },
    routing: {
      map: options.sniMap,
      slotPrefix: slotPrefixFor(options.namePrefix),
      balance: options.balance,
      minSlots: options.minSlots,
      routes: sorted.map((route) => mapRoute(route, options.healthChecks)),
      allowMap: options.allowMap,
      dualStack: isDualStack(options.bind.address),
    },
  };
}

/** The frontend's guard (`edge.ts`) for these options. */
function edgeOf(o: RenderOptions): Edge {
  const p = o.perSource;
  return {
    maxConn: o.maxConn,
    perSource: p.maxConn > 0 || p.maxRate > 0 ? p : null,
    rejectUnknown: o.defaultBackend === null,
    allowMap: o.allowMap,
    refusals: refusalsBackendFor(o.namePrefix),
  };
}

const NO_ROUTES: readonly Route[] = [];

/** Map routing's desired frontend and routing settings, without routes (rendered once per options). */
export function desiredShape(options: RenderOptions): DesiredConfig {
  return renderDesired(NO_ROUTES, options);
}

/** One route as map routing renders it (remembered per route and setting). */
export function renderRoute(route: Route, options: RenderOptions): MapRoute {
  return mapRoute(route, options.healthChecks);
}

type MapRoute = DesiredConfig['routing']['routes'][number];
// Routes are immutable and kept from pass to pass (`DesiredRoutesMemo`): each is rendered once per setting.
const rendered = new WeakMap<Route, { check: boolean; value: MapRoute }>();

function mapRoute(route: Route, check: boolean): MapRoute {
  const hit = rendered.get(route);
  if (hit?.check === check) return hit.value;
  const servers = route.endpoints.map((e) => ({ address: e.address, port: e.port, check }));
  const value = { host: route.host, cluster: route.cluster, servers, networks: route.networks };
  rendered.set(route, { check, value });
  return value;
}

function sortedByHost(routes: readonly Route[]): boolean {
  for (let i = 1; i < routes.length; i++)
    if (compareStrings((routes[i - 1] as Route).host, (routes[i] as Route).host) > 0) return false;
  return true;
}
