import type { Latencies, ZeroReloadResult } from './run.js';

/** Issue 21's bounds, per provider: new cluster, move and delete to traffic. */
export const TARGET_P50_MS: Record<string, number> = { haproxy: 20, dataplaneapi: 40 };
export const TARGET_P99_MS = 100;

const ms = (v: number | null | undefined) => (v === null || v === undefined ? '—' : String(v));
const lat = (l: Latencies | undefined) =>
  l ? `${ms(l.p50)} / ${ms(l.p99)}${l.missing ? ` (${l.missing} missing)` : ''}` : '—';
const reloads = (r: ZeroReloadResult) =>
  r.add && r.move && r.remove ? `${r.add.reloads} / ${r.move.reloads} / ${r.remove.reloads}` : '—';

/** The results as a Markdown page: one row per provider, routing mode and N. */
export function markdown(results: ZeroReloadResult[], machine: string): string {
  const rows = [...results].sort(
    (a, b) => a.provider.localeCompare(b.provider) || a.routing.localeCompare(b.routing) || a.n - b.n,
  );
  const lines = [
    '# bench/zero-reload.ts: map routing against the targets of issue 21',
    '',
    `machine: ${machine}`,
    '',
    'Latencies in ms, p50 / p99, from the signed webhook (`?wait=true`) being sent to the first TLS handshake by',
    `SNI that proves the change (targets: p50 ≤ ${TARGET_P50_MS.haproxy} stock, ≤ ${TARGET_P50_MS.dataplaneapi} Data Plane API; p99 ≤ ${TARGET_P99_MS}).`,
    'Reloads are HAProxy\'s own count (master `show proc`). "stream" is one TLS connection held open through the',
    'adds and deletes of other clusters; "workers" is how many HAProxy workers run afterwards.',
    '',
    '| provider | routing | N | cold: N in one request → routable (s) | restart → ready (s) | new cluster | endpoint move | delete → closed | reloads add/move/delete | burst: routable (ms), reloads | stream survived, workers after (changes) | RSS / peak / heap MB |',
    '| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |',
  ];
  for (const r of rows) {
    const s = (v: number | null | undefined) => (v === null || v === undefined ? '—' : (v / 1000).toFixed(1));
    const res = r.resources;
    lines.push(
      `| ${r.provider}${r.slots ? ` (slots: ${r.slots})` : ''} | ${r.routing} | ${r.n} | ${s(r.cold?.routableMs)} (${r.cold?.reloads ?? '—'} reloads) | ${s(r.cold?.restartReadyMs)} | ${lat(r.add)} | ${lat(r.move)} | ${lat(r.remove)} | ${reloads(r)} | ` +
        `${r.burst ? `${ms(r.burst.routableMs)}${r.burst.missing ? ` (${r.burst.missing} missing)` : ''}, ${r.burst.reloads} (${r.burst.count} clusters)` : '—'} | ` +
        `${r.stream ? `${r.stream.survived ? 'yes' : 'no'}, ${r.stream.workersAfter} (${r.stream.changes}, ${r.stream.reloads} reloads)` : '—'} | ` +
        `${res ? `${Math.round(res.rssMb)} / ${Math.round(res.peakRssMb)} / ${res.heapUsedMb ?? '—'}` : '—'} |` +
        (r.error ? ` error: ${r.error.slice(0, 120)}` : ''),
    );
  }
  return `${lines.join('\n')}\n\n![p50 and p99 of a new cluster to routable, by N](zero-reload.svg)\n`;
}

/** p50 and p99 of a new cluster against N (log scale), one line per provider and routing mode. */
export function chart(results: ZeroReloadResult[]): string {
  const W = 640;
  const H = 360;
  const left = 60;
  const bottom = 40;
  const ns = [...new Set(results.map((r) => r.n))].sort((a, b) => a - b);
  const series = new Map<string, ZeroReloadResult[]>();
  for (const r of results) {
    const k = `${r.provider} ${r.routing}`;
    series.set(
      k,
      [...(series.get(k) ?? []), r].sort((a, b) => a.n - b.n),
    );
  }
  const values = results
    .flatMap((r) => [r.add?.p50, r.add?.p99])
    .filter((v): v is number => typeof v === 'number');
  const maxY = Math.max(TARGET_P99_MS, ...values, 1) * 1.1;
  const x = (n: number) => left + (ns.length <= 1 ? 0 : (ns.indexOf(n) * (W - left - 20)) / (ns.length - 1));
  const y = (v: number) => H - bottom - (v / maxY) * (H - bottom - 20);
  const colours = ['#1f77b4', '#d62728', '#2ca02c', '#9467bd'];
  const parts = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" font-family="sans-serif" font-size="11">`,
    `<line x1="${left}" y1="${H - bottom}" x2="${W - 10}" y2="${H - bottom}" stroke="#000"/>`,
    `<line x1="${left}" y1="10" x2="${left}" y2="${H - bottom}" stroke="#000"/>`,
    `<line x1="${left}" y1="${y(TARGET_P99_MS)}" x2="${W - 10}" y2="${y(TARGET_P99_MS)}" stroke="#999" stroke-dasharray="4"/>`,
    `<text x="${W - 12}" y="${y(TARGET_P99_MS) - 3}" text-anchor="end" fill="#666">p99 target ${TARGET_P99_MS} ms</text>`,
    `<text x="${left - 40}" y="14">ms</text>`,
    ...ns.map((n) => `<text x="${x(n)}" y="${H - bottom + 15}" text-anchor="middle">N=${n}</text>`),
  ];
  [...series.entries()].forEach(([name, rows], i) => {
    const c = colours[i % colours.length];
    for (const [field, dash] of [
      ['p50', ''],
      ['p99', ' stroke-dasharray="2"'],
    ] as const) {
      const pts = rows
        .filter((r) => typeof r.add?.[field] === 'number')
        .map((r) => `${x(r.n)},${y(r.add[field] as number)}`);
      if (pts.length) parts.push(`<polyline fill="none" stroke="${c}"${dash} points="${pts.join(' ')}"/>`);
    }
    parts.push(`<text x="${left + 10}" y="${20 + i * 14}" fill="${c}">${name}: p50 solid, p99 dotted</text>`);
  });
  parts.push('</svg>');
  return `${parts.join('\n')}\n`;
}
