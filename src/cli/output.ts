import type { ClusterStatus } from '../reconcile/status.js';

/** Where a command writes: standard output for results, standard error for problems and progress. */
export interface Output {
  out(line: string): void;
  err(line: string): void;
}

/** Clusters as an aligned table, one line each (the last column, the reason, is not padded). */
export function clusterTable(clusters: readonly ClusterStatus[], withLastApplied = true): string[] {
  return aligned([
    ['NAME', 'HOST', 'STATE', 'API ENDPOINT', ...(withLastApplied ? ['LAST APPLIED'] : []), 'REASON'],
    ...clusters.map((c) => [
      c.name,
      c.host,
      c.state,
      c.api_endpoint ?? '-',
      ...(withLastApplied ? [c.last_applied_at ?? '-'] : []),
      c.reason ?? '',
    ]),
  ]);
}

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
