import type { ClusterStatus } from '../reconcile/status.js';

/** Where a command writes: standard output for results, standard error for problems and progress. */
export interface Output {
  out(line: string): void;
  err(line: string): void;
}

/**
 * Clusters as an aligned table, one line each (the last column, the reason, is not padded). NETWORKS shows
 * only when some cluster has authorized networks, so that a table of open clusters reads as it always did.
 */
export function clusterTable(clusters: readonly ClusterStatus[], withLastApplied = true): string[] {
  const withNetworks = clusters.some((c) => networksOf(c).length > 0);
  return aligned([
    [
      'NAME',
      'HOST',
      'STATE',
      'API ENDPOINT',
      ...(withLastApplied ? ['LAST APPLIED'] : []),
      ...(withNetworks ? ['NETWORKS'] : []),
      'REASON',
    ],
    ...clusters.map((c) => [
      c.name,
      c.host,
      c.state,
      c.api_endpoint ?? '-',
      ...(withLastApplied ? [c.last_applied_at ?? '-'] : []),
      ...(withNetworks ? [networksCell(networksOf(c))] : []),
      c.reason ?? '',
    ]),
  ]);
}

/** The widest NETWORKS cell before the list is cut short. */
export const NETWORKS_CELL_WIDTH = 40;

/**
 * A cluster's authorized networks in one table cell without spaces: `open`, the list comma-separated, or as
 * many entries as fit in `NETWORKS_CELL_WIDTH` then `+N` for the N not shown (`--json` gives them all).
 */
export function networksCell(networks: readonly string[]): string {
  if (networks.length === 0) return 'open';
  const all = networks.join(',');
  if (all.length <= NETWORKS_CELL_WIDTH) return all;
  let shown = 1;
  let width = (networks[0] ?? '').length;
  while (shown < networks.length) {
    const next = width + 1 + (networks[shown] ?? '').length;
    if (next + `,+${networks.length - shown - 1}`.length > NETWORKS_CELL_WIDTH) break;
    width = next;
    shown++;
  }
  return shown === networks.length
    ? all
    : `${networks.slice(0, shown).join(',')},+${networks.length - shown}`;
}

/**
 * Every cluster's authorized networks in full, one line each, after a blank line: nothing when every
 * cluster is open to all (the common case, said in one line by the table's absence of NETWORKS).
 */
export function networksSection(clusters: readonly ClusterStatus[]): string[] {
  const listed = clusters.filter((c) => networksOf(c).length > 0);
  if (listed.length === 0) return [];
  return [
    '',
    ...aligned([
      ['CLUSTER', 'AUTHORIZED NETWORKS'],
      ...clusters.map((c) => [c.name, networksOf(c).length > 0 ? networksOf(c).join(', ') : 'open to all']),
    ]),
  ];
}

// A service older than the command line answers without the field: its clusters are open.
const networksOf = (c: ClusterStatus): readonly string[] => c.authorized_networks ?? [];

/** A host, the backend that serves it, and that backend's servers (`address:port`). */
export interface RouteRow {
  host: string;
  backend: string;
  servers: readonly string[];
}

/**
 * Host -> backend -> servers, by host: with map routing the only place a host's slot backend shows (HAProxy's
 * configuration has one map lookup, no line per host). Empty when nothing is routed.
 */
export function routeTable(routes: Iterable<RouteRow>): string[] {
  const rows = [...routes].sort((a, b) => (a.host < b.host ? -1 : a.host > b.host ? 1 : 0));
  if (rows.length === 0) return [];
  return aligned([
    ['HOST', 'BACKEND', 'SERVERS'],
    ...rows.map((r) => [r.host, r.backend, r.servers.length > 0 ? r.servers.join(',') : '(none)']),
  ]);
}

/** `routeTable` after a blank line, or nothing when nothing is routed. */
export function routeSection(routes: Iterable<RouteRow>): string[] {
  const table = routeTable(routes);
  return table.length > 0 ? ['', ...table] : [];
}

/** The routes of clusters that have a backend, for `routeTable`. */
export function routesOf(clusters: readonly ClusterStatus[]): RouteRow[] {
  return clusters.flatMap((c) =>
    c.backend ? [{ host: c.host, backend: c.backend, servers: c.servers }] : [],
  );
}

/** Rows as aligned columns (the last one not padded). */
function aligned(rows: string[][]): string[] {
  const widths = rows[0]?.map((_, i) => Math.max(...rows.map((r) => (r[i] ?? '').length))) ?? [];
  return rows.map((r) =>
    r
      .map((cell, i) => (i === r.length - 1 ? cell : cell.padEnd(widths[i] ?? 0)))
      .join('  ')
      .trimEnd(),
  );
}
