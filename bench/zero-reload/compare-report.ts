import type { ZeroReloadResult } from './run.js';

/** One run of bench/zero-reload.ts for one side of a comparison. */
export interface CompareRun {
  side: 'before' | 'after';
  commit: string;
  startedAt: string;
  uptimeBefore: string;
  uptimeAfter: string;
  results: ZeroReloadResult[];
}

interface Metric {
  name: string;
  get(r: ZeroReloadResult): number | null | undefined;
  /** Counts compare exactly: any difference is beyond noise. */
  exact?: boolean;
}

const METRICS: Metric[] = [
  { name: 'new cluster p50 (ms)', get: (r) => r.add?.p50 },
  { name: 'new cluster p99 (ms)', get: (r) => r.add?.p99 },
  { name: 'endpoint move p50 (ms)', get: (r) => r.move?.p50 },
  { name: 'endpoint move p99 (ms)', get: (r) => r.move?.p99 },
  { name: 'delete → closed p50 (ms)', get: (r) => r.remove?.p50 },
  { name: 'delete → closed p99 (ms)', get: (r) => r.remove?.p99 },
  {
    name: 'reloads: adds + moves + deletes',
    get: (r) => (r.add && r.move && r.remove ? r.add.reloads + r.move.reloads + r.remove.reloads : null),
    exact: true,
  },
  { name: 'reloads: held stream (1000 changes)', get: (r) => r.stream?.reloads, exact: true },
  { name: 'cold: N in one request → routable (ms)', get: (r) => r.cold?.routableMs },
  { name: 'cold: restart → ready (ms)', get: (r) => r.cold?.restartReadyMs },
  { name: 'burst of 1000 → routable (ms)', get: (r) => r.burst?.routableMs },
  { name: 'service RSS after (MB)', get: (r) => (r.resources ? Math.round(r.resources.rssMb) : null) },
  { name: 'service peak RSS (MB)', get: (r) => (r.resources ? Math.round(r.resources.peakRssMb) : null) },
  { name: 'V8 heap used (MB)', get: (r) => r.resources?.heapUsedMb },
];

const groupKey = (r: ZeroReloadResult) => `${r.provider}${r.slots ? ` (slots: ${r.slots})` : ''}|${r.n}`;
const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
const round = (x: number) => (Math.abs(x) >= 100 ? Math.round(x) : Math.round(x * 10) / 10);
const spread = (xs: number[]) => (xs.length >= 2 ? Math.max(...xs) - Math.min(...xs) : null);
const v = (x: number | null) => (x === null ? '—' : String(round(x)));

export interface Judged {
  before: number[];
  after: number[];
  delta: number | null;
  noise: number | null;
  verdict: string;
}

/**
 * After against before for one metric: the difference of the means against the noise, the larger spread
 * (max - min) between runs of the same side. Slower beyond it is a regression; a count differs or not.
 */
export function judge(before: number[], after: number[], exact = false): Judged {
  if (before.length === 0 || after.length === 0)
    return { before, after, delta: null, noise: null, verdict: 'missing' };
  const delta = mean(after) - mean(before);
  const spreads = [spread(before), spread(after)].filter((s): s is number => s !== null);
  const noise = exact ? 0 : spreads.length ? Math.max(...spreads) : null;
  let verdict: string;
  if (noise === null) verdict = 'no repeat: noise unknown';
  else if (delta > noise) verdict = exact ? 'more' : 'higher beyond noise';
  else if (delta < -noise) verdict = exact ? 'fewer' : 'lower beyond noise';
  else verdict = exact ? 'same' : 'within noise';
  return { before, after, delta, noise, verdict };
}

/** The comparison as Markdown: a summary per provider and N, then each metric with every run. */
export function compareMarkdown(runs: CompareRun[], machine: string): string {
  const groups = new Map<string, { before: ZeroReloadResult[]; after: ZeroReloadResult[] }>();
  for (const run of runs)
    for (const r of run.results) {
      const g = groups.get(groupKey(r)) ?? { before: [], after: [] };
      g[run.side].push(r);
      groups.set(groupKey(r), g);
    }
  const keys = [...groups.keys()].sort((a, b) => {
    const [pa, na] = a.split('|');
    const [pb, nb] = b.split('|');
    return (pa as string).localeCompare(pb as string) || Number(na) - Number(nb);
  });
  const values = (rs: ZeroReloadResult[], m: Metric) =>
    rs.filter((r) => !r.error).flatMap((r) => (typeof m.get(r) === 'number' ? [m.get(r) as number] : []));
  const cell = (j: Judged) =>
    `${j.before.length ? round(mean(j.before)) : '—'} → ${j.after.length ? round(mean(j.after)) : '—'}`;
  const lines = [
    '# Zero-reload before and after the refactor (issue 32)',
    '',
    `machine: ${machine}. Made by \`bench/zero-reload-compare.ts\`: the same \`bench/zero-reload.ts\` (this`,
    "checkout's) ran each side's build, interleaved (before, after, before, after, ...) so that the load of the",
    'shared machine falls on both alike; the load average at each run is listed at the end.',
    '',
    '## Summary: mean of the runs of each side, before → after',
    '',
    '| provider | N | runs (before / after) | new cluster p50 / p99 (ms) | endpoint move p50 / p99 (ms) | delete p50 / p99 (ms) | reloads (add+move+delete; stream) | cold: N → routable; restart → ready (s) | service RSS / peak (MB) | metrics beyond noise |',
    '| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |',
  ];
  const details: string[] = [];
  for (const key of keys) {
    const g = groups.get(key) as { before: ZeroReloadResult[]; after: ZeroReloadResult[] };
    const [provider, n] = key.split('|');
    const judged = METRICS.map((m) => ({ m, j: judge(values(g.before, m), values(g.after, m), m.exact) }));
    const j = (name: string) => (judged.find((x) => x.m.name.startsWith(name)) as { j: Judged }).j;
    const s = (x: Judged) =>
      `${x.before.length ? (mean(x.before) / 1000).toFixed(2) : '—'} → ${x.after.length ? (mean(x.after) / 1000).toFixed(2) : '—'}`;
    const flagged = judged.filter(
      ({ j }) => /beyond|more|unknown/.test(j.verdict) && j.verdict !== 'lower beyond noise',
    );
    const errors = [...g.before, ...g.after].filter((r) => r.error).length;
    lines.push(
      `| ${provider} | ${n} | ${g.before.length} / ${g.after.length}${errors ? ` (${errors} with an error)` : ''} | ${cell(j('new cluster p50'))}; ${cell(j('new cluster p99'))} | ${cell(j('endpoint move p50'))}; ${cell(j('endpoint move p99'))} | ${cell(j('delete → closed p50'))}; ${cell(j('delete → closed p99'))} | ${cell(j('reloads: adds'))}; ${cell(j('reloads: held'))} | ${s(j('cold: N'))}; ${s(j('cold: restart'))} | ${cell(j('service RSS'))} / ${cell(j('service peak'))} | ${flagged.length ? flagged.map(({ m, j }) => `${m.name}: ${j.verdict}`).join('; ') : 'none'} |`,
    );
    details.push(
      '',
      `### ${provider}, N = ${n}`,
      '',
      '| metric | before runs | after runs | before spread | after spread | Δ means | noise | verdict |',
      '| --- | --- | --- | --- | --- | --- | --- | --- |',
      ...judged.map(
        ({ m, j }) =>
          `| ${m.name} | ${j.before.join(', ') || '—'} | ${j.after.join(', ') || '—'} | ${v(spread(j.before))} | ${v(spread(j.after))} | ${j.delta === null ? '—' : round(j.delta)} | ${j.noise === null ? '—' : round(j.noise)} | ${j.verdict} |`,
      ),
    );
    for (const r of [...g.before, ...g.after].filter((x) => x.error))
      details.push('', `error in a run: ${r.error?.slice(0, 300)}`);
  }
  lines.push(
    '',
    'Noise: the larger spread (max - min) between runs of the same side. "Beyond noise" means the means differ by',
    'more than that; reload counts compare exactly. p99 of 40 changes is the slowest of them.',
    '',
    '## Per provider and N, every run',
    ...details,
    '',
    '## Runs, in order (load average before → after each run)',
    '',
    '| # | side | commit | started (UTC) | uptime before | uptime after |',
    '| --- | --- | --- | --- | --- | --- |',
    ...runs.map(
      (r, i) =>
        `| ${i + 1} | ${r.side} | ${r.commit} | ${r.startedAt.slice(0, 19).replace('T', ' ')} | ${r.uptimeBefore.replace(/^.*load/, 'load')} | ${r.uptimeAfter.replace(/^.*load/, 'load')} |`,
    ),
  );
  return `${lines.join('\n')}\n`;
}
