import type { ApproachName } from './approaches.js';
import type { RunResult, Usage } from './scenario.js';
import type { ProviderName } from './targets.js';

export interface Environment {
  date: string;
  machine: string;
  cores: number;
  memoryGb: number;
  kernel: string;
  node: string;
  haproxy: Partial<Record<ProviderName, string>>;
  dataplaneapi?: string;
  /** `uptime` at the start and the end of the run. */
  uptime: { start: string; end?: string };
  command: string;
  omitted: string[];
}

export interface Report {
  environment: Environment;
  runs: RunResult[];
}

const APPROACHES: ApproachName[] = ['ours', 'rewrite', 'naive'];

type Num = number | null | undefined;

function fmtMs(v: Num): string {
  if (v === null || v === undefined) return '—';
  return v >= 10_000 ? `${(v / 1000).toFixed(1)} s` : `${Math.round(v)} ms`;
}
function fmtN(v: Num): string {
  if (v === null || v === undefined || v < 0) return '—';
  return Number.isInteger(v) ? String(v) : v.toFixed(1);
}
function fmtBytes(v: Num): string {
  if (v === null || v === undefined) return '—';
  if (v >= 1024 * 1024) return `${(v / 1024 / 1024).toFixed(1)} MB`;
  if (v >= 1024) return `${(v / 1024).toFixed(1)} kB`;
  return `${Math.round(v)} B`;
}
function ratio(a: Num, b: Num): string {
  if (a === null || a === undefined || b === null || b === undefined || a < 0 || b < 0) return '—';
  if (b === 0) return a === 0 ? '1' : '∞';
  const r = a / b;
  return r >= 10 ? r.toFixed(0) : r >= 1 ? r.toFixed(2) : r.toFixed(3);
}

interface Row {
  label: string;
  value: (r: RunResult) => Num;
  fmt: (v: Num) => string;
}

const usageRows = (phase: string, get: (r: RunResult) => Usage | undefined): Row[] => [
  { label: `${phase}: requests`, value: (r) => get(r)?.requests, fmt: fmtN },
  { label: `${phase}: bytes`, value: (r) => get(r)?.bytes, fmt: fmtBytes },
  { label: `${phase}: reloads`, value: (r) => get(r)?.reloads, fmt: fmtN },
];

const ROWS: Row[] = [
  { label: '1 cold sync: all N routable', value: (r) => r.cold?.routableMs, fmt: fmtMs },
  ...usageRows('1 cold sync', (r) => r.cold?.usage),
  { label: '2 one change: p50 to routable', value: (r) => r.change?.p50, fmt: fmtMs },
  { label: '2 one change: p95 to routable', value: (r) => r.change?.p95, fmt: fmtMs },
  { label: '2 one change: requests (mean)', value: (r) => r.change?.mean.requests, fmt: fmtN },
  { label: '2 one change: writes (mean)', value: (r) => r.change?.mean.writes, fmt: fmtN },
  { label: '2 one change: bytes (mean)', value: (r) => r.change?.mean.bytes, fmt: fmtBytes },
  { label: '2 one change: reloads (mean)', value: (r) => r.change?.mean.reloads, fmt: fmtN },
  ...['render', 'read', 'plan', 'apply'].map(
    (phase): Row => ({
      label: `2 one change: time in ${phase} (mean)`,
      value: (r) => r.change?.phasesMs?.[phase],
      fmt: fmtMs,
    }),
  ),
  {
    label: '3 burst: converged',
    value: (r) => r.burst?.convergeMs ?? r.burst?.extrapolatedMs,
    fmt: fmtMs,
  },
  { label: '3 burst: reloads', value: (r) => r.burst?.usage.reloads, fmt: fmtN },
  { label: '3 burst: applies (transactions, pushes)', value: (r) => r.burst?.usage.applies, fmt: fmtN },
  { label: '3 burst: requests', value: (r) => r.burst?.usage.requests, fmt: fmtN },
  { label: '3 burst: HAProxy workers alive after', value: (r) => r.burst?.workersAfter, fmt: fmtN },
  { label: '4 endpoint move: converged', value: (r) => r.move?.convergeMs, fmt: fmtMs },
  ...usageRows('4 endpoint move', (r) => r.move?.usage),
  { label: '5 no-op resync: time', value: (r) => r.noop?.ms, fmt: fmtMs },
  { label: '5 no-op resync: requests', value: (r) => r.noop?.usage.requests, fmt: fmtN },
  {
    label: '5 no-op resync: writes',
    value: (r) =>
      r.noop === undefined
        ? undefined
        : r.noop.usage.writes >= 0
          ? r.noop.usage.writes
          : (r.noop.ownedFileReplaced ? 1 : 0) + r.noop.usage.reloads,
    fmt: fmtN,
  },
  { label: '6 service RSS after the burst (MB)', value: (r) => r.resources?.burst?.rssMb, fmt: fmtN },
  {
    label: '6 service V8 heap used after the burst (MB)',
    value: (r) => r.resources?.burst?.heapUsedMb,
    fmt: fmtN,
  },
  {
    label: '6 service peak RSS (MB)',
    value: (r) => Math.max(0, ...Object.values(r.resources ?? {}).map((x) => x.peakRssMb)) || null,
    fmt: fmtN,
  },
  {
    label: '6 service CPU time, whole run (s)',
    value: (r) => r.resources?.noop?.cpuSeconds,
    fmt: (v) => (v === null || v === undefined ? '—' : v.toFixed(1)),
  },
];

interface Target {
  what: string;
  measured: string;
  met: boolean | null;
}

const runOf = (report: Report, provider: ProviderName, n: number, approach: ApproachName) =>
  report.runs.find((r) => r.provider === provider && r.n === n && r.approach === approach && !r.error);

/** The issue's targets, per provider, judged from the runs (null: not measured in this run). */
export function targets(report: Report): Array<{ provider: ProviderName; rows: Target[] }> {
  const providers = [...new Set(report.runs.map((r) => r.provider))];
  return providers.map((provider) => {
    const ns = report.runs.filter((r) => r.provider === provider && r.approach === 'ours').map((r) => r.n);
    const big = Math.max(...ns);
    const small = Math.min(...ns);
    const ours = (n: number) => runOf(report, provider, n, 'ours');
    const rewrite = runOf(report, provider, big, 'rewrite');
    const o5 = ours(big);
    const o1 = ours(small);
    const o1000 = ours(1000);
    const rows: Target[] = [];
    rows.push({
      what: `one-cluster change at N = ${big}: faster than the full rewrite (p50)`,
      measured: `${fmtMs(o5?.change?.p50)} vs ${fmtMs(rewrite?.change?.p50)}`,
      met: o5?.change && rewrite?.change ? (o5.change.p50 ?? Infinity) < (rewrite.change.p50 ?? 0) : null,
    });
    rows.push({
      what: `one-cluster change: requests independent of N (N = ${small} vs ${big}, mean)`,
      measured: `${fmtN(o1?.change?.mean.requests)} vs ${fmtN(o5?.change?.mean.requests)}`,
      // Polls while a reload runs are the one part that may vary.
      met: o1?.change && o5?.change ? Math.abs(o1.change.mean.requests - o5.change.mean.requests) <= 1 : null,
    });
    // Exactly one while every new cluster got a backend and a rule of its own (rules routing, retired); on the
    // map a new cluster takes a free slot at runtime, and only a pool's growth reloads.
    rows.push({
      what: `one-cluster change: at most 1 reload (N = ${big}, most over the changes)`,
      measured: fmtN(o5?.change?.max.reloads),
      met: o5?.change ? o5.change.max.reloads <= 1 : null,
    });
    rows.push({
      what: 'burst of 200 at N = 1000: ≤ 2 reloads, converged within 3 s',
      measured: o1000?.burst ? `${o1000.burst.usage.reloads} reloads, ${fmtMs(o1000.burst.convergeMs)}` : '—',
      met: o1000?.burst
        ? o1000.burst.usage.reloads <= 2 && o1000.burst.convergeMs !== null && o1000.burst.convergeMs <= 3000
        : null,
    });
    const moves = ns.map((n) => ours(n)?.move?.usage.reloads ?? -1);
    rows.push({
      what: 'endpoint move: 0 reloads (every N)',
      measured: ns.map((n, i) => `${n}: ${moves[i]}`).join(', '),
      met: moves.every((m) => m === 0),
    });
    const noopWrites = o5?.noop
      ? o5.noop.usage.writes >= 0
        ? o5.noop.usage.writes
        : (o5.noop.ownedFileReplaced ? 1 : 0) + o5.noop.usage.reloads
      : undefined;
    rows.push({
      what: `no-op resync at N = ${big}: 0 writes, under 1 s`,
      measured: o5?.noop ? `${noopWrites} writes, ${fmtMs(o5.noop.ms)}` : '—',
      met: o5?.noop ? noopWrites === 0 && o5.noop.ms < 1000 : null,
    });
    rows.push({
      what: `cold sync of ${big} under 30 s`,
      measured: fmtMs(o5?.cold?.routableMs),
      met: o5?.cold?.routableMs != null ? o5.cold.routableMs < 30_000 : null,
    });
    const peak = o5 ? Math.max(0, ...Object.values(o5.resources ?? {}).map((x) => x.peakRssMb)) : undefined;
    rows.push({
      what: `service RSS under 200 MB at ${big} (peak)`,
      measured: peak ? `${peak.toFixed(0)} MB` : '—',
      met: peak ? peak < 200 : null,
    });
    return { provider, rows };
  });
}

export function markdown(report: Report, chartFile: string): string {
  const e = report.environment;
  const out: string[] = [
    '# Side by side: the service against a full rewrite and a naive per-change apply',
    '',
    `Generated by \`${e.command}\` on ${e.date}.`,
    '',
    `Machine: ${e.machine}, ${e.cores} cores, ${e.memoryGb} GB, Linux ${e.kernel}, Node ${e.node}. ` +
      `HAProxy ${Object.entries(e.haproxy)
        .map(([p, v]) => `${v} (${p})`)
        .join(', ')}${e.dataplaneapi ? `, Data Plane API ${e.dataplaneapi}` : ''}. ` +
      'The cores are shared with other work: treat times as rough.',
    '',
    `Load (\`uptime\`) at the start: \`${e.uptime.start}\`; at the end: \`${e.uptime.end ?? '?'}\`.`,
    '',
    '- **ours**: the service (`node dist/cli/main.js serve`), Kubernetes topology against a real kube-apiserver, ' +
      "the loop's debounce (0 ms, at most 2 s: constants), every change a signed webhook answered with `?wait=true`.",
    '- **rewrite**: render the whole configuration and push it on every change (Data Plane API: ' +
      '`POST /configuration/raw?force_reload=true`; stock HAProxy: write the owned file, `haproxy -c`, ' +
      '`reload`); a resync compares with what is deployed and pushes only a difference.',
    '- **naive**: the same provider code driven once per change, no debounce, no coalescing: read, plan, apply ' +
      'for every webhook in turn.',
    '',
    'Ratios are ours / theirs (below 1: ours is smaller or faster). "—": not measured or not countable.',
    '',
    `![latency and requests against N](${chartFile})`,
    '',
  ];
  if (e.omitted.length > 0) out.push(`Left out: ${e.omitted.join('; ')}.`, '');
  out.push('## Targets', '');
  for (const { provider, rows } of targets(report)) {
    out.push(`${provider}:`, '', '| target | measured (ours) | met |', '| --- | --- | --- |');
    for (const t of rows)
      out.push(`| ${t.what} | ${t.measured} | ${t.met === null ? '—' : t.met ? 'yes' : '**no**'} |`);
    out.push('');
  }
  const providers = [...new Set(report.runs.map((r) => r.provider))];
  for (const provider of providers) {
    const ns = [...new Set(report.runs.filter((r) => r.provider === provider).map((r) => r.n))].sort(
      (a, b) => a - b,
    );
    for (const n of ns) {
      const runs = new Map(
        report.runs.filter((r) => r.provider === provider && r.n === n).map((r) => [r.approach, r]),
      );
      out.push(`## ${provider}, N = ${n}`, '');
      for (const r of runs.values()) if (r.error) out.push(`- ${r.approach} failed: ${r.error}`);
      out.push(
        '| measurement | ours | rewrite | naive | ours/rewrite | ours/naive |',
        '| --- | --- | --- | --- | --- | --- |',
      );
      for (const row of ROWS) {
        const v = Object.fromEntries(
          APPROACHES.map((a) => [a, runs.get(a) ? row.value(runs.get(a) as RunResult) : undefined]),
        );
        out.push(
          `| ${row.label} | ${row.fmt(v.ours)} | ${row.fmt(v.rewrite)} | ${row.fmt(v.naive)} | ${ratio(v.ours, v.rewrite)} | ${ratio(v.ours, v.naive)} |`,
        );
      }
      const burst = [...runs.values()].filter((r) => r.burst && r.burst.dropped > 0);
      for (const r of burst)
        out.push(
          '',
          `${r.approach}: the burst passed the time cap with ${r.burst.dropped} of ${r.burst.count} changes not applied; the time shown is extrapolated from the rate reached.`,
        );
      out.push('');
    }
  }
  return `${out.join('\n')}\n`;
}

// ---- the chart: one-change latency and requests per change against N, log scales, written by hand ----

const COLORS: Record<ApproachName, string> = { ours: '#1b7837', rewrite: '#c51b7d', naive: '#2166ac' };
const DASH: Record<ProviderName, string> = { dataplaneapi: '', haproxy: '6 4' };

interface Panel {
  title: string;
  unit: string;
  value: (r: RunResult) => Num;
}

export function chart(report: Report): string {
  const panels: Panel[] = [
    { title: 'One change: p50 webhook → routable', unit: 'ms', value: (r) => r.change?.p50 },
    {
      title: 'One change: requests to HAProxy / its API',
      unit: 'requests',
      value: (r) => r.change?.mean.requests,
    },
  ];
  const W = 460;
  const H = 300;
  const M = { l: 64, r: 16, t: 36, b: 44 };
  const ns = [...new Set(report.runs.map((r) => r.n))].sort((a, b) => a - b);
  const series = [...new Set(report.runs.map((r) => `${r.provider}|${r.approach}`))];
  const parts: string[] = [];
  panels.forEach((panel, pi) => {
    const x0 = pi * W;
    const values = report.runs.map(panel.value).filter((v): v is number => typeof v === 'number' && v > 0);
    if (values.length === 0 || ns.length === 0) return;
    const lo = 10 ** Math.floor(Math.log10(Math.min(...values)));
    const hi = 10 ** Math.ceil(Math.log10(Math.max(...values)));
    const nLo = Math.min(...ns);
    const nHi = Math.max(...ns);
    const sx = (n: number) =>
      x0 +
      M.l +
      (nHi === nLo ? 0.5 : (Math.log10(n) - Math.log10(nLo)) / (Math.log10(nHi) - Math.log10(nLo))) *
        (W - M.l - M.r);
    const sy = (v: number) =>
      M.t +
      (1 - (Math.log10(v) - Math.log10(lo)) / Math.max(1e-9, Math.log10(hi) - Math.log10(lo))) *
        (H - M.t - M.b);
    parts.push(
      `<text x="${x0 + W / 2}" y="20" text-anchor="middle" font-size="14" font-weight="bold">${panel.title}</text>`,
      `<line x1="${x0 + M.l}" y1="${H - M.b}" x2="${x0 + W - M.r}" y2="${H - M.b}" stroke="#333"/>`,
      `<line x1="${x0 + M.l}" y1="${M.t}" x2="${x0 + M.l}" y2="${H - M.b}" stroke="#333"/>`,
      `<text x="${x0 + W / 2}" y="${H - 8}" text-anchor="middle" font-size="12">N routes (log)</text>`,
      `<text x="${x0 + 14}" y="${(H - M.b + M.t) / 2}" text-anchor="middle" font-size="12" transform="rotate(-90 ${x0 + 14} ${(H - M.b + M.t) / 2})">${panel.unit} (log)</text>`,
    );
    for (const n of ns)
      parts.push(
        `<text x="${sx(n)}" y="${H - M.b + 16}" text-anchor="middle" font-size="11">${n}</text>`,
        `<line x1="${sx(n)}" y1="${M.t}" x2="${sx(n)}" y2="${H - M.b}" stroke="#eee"/>`,
      );
    for (let d = lo; d <= hi * 1.0001; d *= 10)
      parts.push(
        `<text x="${x0 + M.l - 6}" y="${sy(d) + 4}" text-anchor="end" font-size="11">${d >= 1000 ? `${d / 1000}k` : d}</text>`,
        `<line x1="${x0 + M.l}" y1="${sy(d)}" x2="${x0 + W - M.r}" y2="${sy(d)}" stroke="#eee"/>`,
      );
    for (const key of series) {
      const [provider, approach] = key.split('|') as [ProviderName, ApproachName];
      const points = report.runs
        .filter((r) => r.provider === provider && r.approach === approach)
        .sort((a, b) => a.n - b.n)
        .map((r) => [r.n, panel.value(r)] as const)
        .filter((p): p is readonly [number, number] => typeof p[1] === 'number' && p[1] > 0);
      if (points.length === 0) continue;
      const d = points
        .map(([n, v], i) => `${i === 0 ? 'M' : 'L'}${sx(n).toFixed(1)},${sy(v).toFixed(1)}`)
        .join(' ');
      parts.push(
        `<path d="${d}" fill="none" stroke="${COLORS[approach]}" stroke-width="2" stroke-dasharray="${DASH[provider]}"/>`,
        ...points.map(
          ([n, v]) =>
            `<circle cx="${sx(n).toFixed(1)}" cy="${sy(v).toFixed(1)}" r="3" fill="${COLORS[approach]}"/>`,
        ),
      );
    }
  });
  const legendY = H + 8;
  series.forEach((key, i) => {
    const [provider, approach] = key.split('|') as [ProviderName, ApproachName];
    const x = 20 + (i % 3) * 300;
    const y = legendY + Math.floor(i / 3) * 20;
    parts.push(
      `<line x1="${x}" y1="${y}" x2="${x + 30}" y2="${y}" stroke="${COLORS[approach]}" stroke-width="2" stroke-dasharray="${DASH[provider]}"/>`,
      `<text x="${x + 36}" y="${y + 4}" font-size="12">${approach} (${provider})</text>`,
    );
  });
  const height = legendY + Math.ceil(series.length / 3) * 20 + 8;
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${W * panels.length}" height="${height}" viewBox="0 0 ${W * panels.length} ${height}" font-family="sans-serif">\n<rect width="100%" height="100%" fill="white"/>\n${parts.join('\n')}\n</svg>\n`;
}
