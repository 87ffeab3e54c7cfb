import type { ClusterStatus } from '../reconcile/status.js';

/** Where a command writes: standard output for results, standard error for problems and progress. */
export interface Output {
  out(line: string): void;
  err(line: string): void;
}

/** Clusters as an aligned table, one line each (the last column, the reason, is not padded). */
export function clusterTable(clusters: readonly ClusterStatus[], withLastApplied = true): string[] {
  const rows = [
    ['NAME', 'HOST', 'STATE', 'API ENDPOINT', ...(withLastApplied ? ['LAST APPLIED'] : []), 'REASON'],
    ...clusters.map((c) => [
      c.name,
      c.host,
      c.state,
      c.api_endpoint ?? '-',
      ...(withLastApplied ? [c.last_applied_at ?? '-'] : []),
      c.reason ?? '',
    ]),
  ];
  const widths = rows[0]?.map((_, i) => Math.max(...rows.map((r) => (r[i] ?? '').length))) ?? [];
  return rows.map((r) =>
    r
      .map((cell, i) => (i === r.length - 1 ? cell : cell.padEnd(widths[i] ?? 0)))
      .join('  ')
      .trimEnd(),
  );
}
