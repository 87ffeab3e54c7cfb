import { ATTACK_NAMES, type PhaseResult, type RunResult } from './run.js';

const v = (x: number | null | undefined, unit = '') => (x === null || x === undefined ? '—' : `${x}${unit}`);
const mb = (kib: number | null | undefined) =>
  kib === null || kib === undefined ? '—' : `${Math.round(kib / 1024)}`;

function legitCell(p: PhaseResult): string {
  const l = p.legit;
  const fails = Object.entries(l.failures)
    .map(([k, n]) => `${n} ${k}`)
    .join(', ');
  return `${l.attempted} / ${l.failed}${fails ? ` (${fails})` : ''}`;
}

function attackerCell(p: PhaseResult): string {
  const a = p.attacker;
  if (!a) return '—';
  const parts = [
    `${a.attempts} tried in ${Math.round(a.ranMs / 1000)} s`,
    `${a.established} established`,
    `held ≤ ${a.heldMax}`,
  ];
  if (a.kind === 'idle-after-tls') parts.push(`${a.tlsHandshakes} TLS done`);
  if (a.kind === 'slow-hello') parts.push(`${a.hellosCompleted} hellos completed`);
  if (a.kind === 'refused-network') parts.push(`${a.answered ?? 0} answered by the cluster`);
  if (a.closedByHaproxy > 0)
    parts.push(
      `${a.closedByHaproxy} closed by HAProxy after p50 ${v(a.closedByHaproxyWithinMs.p50)} / max ${v(a.closedByHaproxyWithinMs.max)} ms`,
    );
  const errors = Object.entries(a.connectErrors)
    .filter(([k]) => k !== 'still connecting at the end')
    .map(([k, n]) => `${n} ${k}`)
    .join(', ');
  if (errors) parts.push(`connect errors: ${errors}`);
  return parts.join('; ');
}

function haproxyCell(p: PhaseResult): string {
  const h = p.haproxy;
  const parts = [
    `conns ≤ ${v(h.currConnsMax)} (fe ≤ ${v(h.scurMax)}/${v(h.slim)})`,
    `RSS ${mb(h.rssStartKiB)}→${mb(h.rssMaxKiB)}→${mb(h.rssEndKiB)} MB`,
    `CPU ${h.cpuMs === null ? '—' : (h.cpuMs / 1000).toFixed(1)} s`,
    `dcon +${v(h.dconDelta)}`,
    `dreq +${v(h.dreqDelta)}`,
  ];
  if (h.refusedDelta !== null && h.refusedDelta !== undefined)
    parts.push(`refused (authorized networks) +${h.refusedDelta}`);
  if (h.tableUsedMax !== null) parts.push(`table used ≤ ${h.tableUsedMax}`);
  if (h.attackerEntryMax)
    parts.push(
      `attacker conn_cur ≤ ${h.attackerEntryMax.conn_cur}, conn_rate ≤ ${h.attackerEntryMax.conn_rate}`,
    );
  if (h.legitEntryMax)
    parts.push(`legit conn_cur ≤ ${h.legitEntryMax.conn_cur}, conn_rate ≤ ${h.legitEntryMax.conn_rate}`);
  if (h.cliTimeouts > 0) parts.push(`${h.cliTimeouts}/${h.samples} CLI samples timed out`);
  return parts.join('; ');
}

function label(r: RunResult): string {
  const p = r.overrides?.perSource;
  if (p) return `${r.config} (per source: ${p.maxConn || 'no'} connections, ${p.maxRate || 'no'} per 10 s)`;
  return r.provider === 'dataplaneapi' ? `${r.config} (Data Plane API)` : r.config;
}

export function markdown(results: RunResult[], machine: string): string {
  const lines = [
    '# bench/attack.ts: the SNI frontend under attack (issue 33, part 3)',
    '',
    `machine: ${machine}`,
    '',
    'Each run: a fresh HAProxy test bed (host networking, loopback only) with docker/compose/haproxy.cfg as the',
    "operator's global/defaults and the owned file the stock provider writes with its default settings for two",
    'clusters whose TLS server is on 127.0.0.1, one open, one whose authorized networks are 127.0.0.2/32; `after`',
    'is that file as written (the guard of src/haproxy/edge.ts), `before` the same with the SNI frontend as',
    'written before the guard (inspect delay and ClientHello accept only); `after (Data Plane API)`: the same',
    'clusters and settings written by the Data Plane API provider. The legitimate client connects from',
    '127.0.0.2: a full TLS handshake with SNI every 50 ms, to each cluster in turn (timed from connect() to the',
    "server's certificate; failed = error, reset or no handshake within 10 s),",
    'and two watch streams held for the whole run (a byte echoed every 3 s; a byte every 40 s, longer than',
    '`timeout client`). Attacks come from 127.0.0.1, one at a time, each bounded in time and connections.',
    '"legit" = handshakes attempted / failed; latencies over the successful ones; "TCP connect" is the part before',
    "HAProxy accepts (the kernel's handshake; the rest is HAProxy accepting, reading the ClientHello, connecting to",
    'the server and the TLS exchange). "load" is the machine\'s 1-minute load average (2 cores, shared with other',
    'work). "bench stalls" is the largest event-loop delay of the legitimate client\'s own process / of the TLS',
    "backend's process during the phase: time that adds to handshakes there and is not HAProxy's. HAProxy: its",
    "connections (`show info` CurrConns; the frontend's scur/slim), the worker's RSS (start→max→end), connections denied",
    'by `tcp-request connection` (dcon) and by content rules (dreq), sampled every second, and the CPU time the',
    'worker used during the phase.',
    '',
  ];
  const versions = [...new Set(results.map((r) => r.version))].sort();
  for (const version of versions) {
    for (const r of results
      .filter((x) => x.version === version)
      .sort((a, b) => label(b).localeCompare(label(a)))) {
      lines.push(
        `## HAProxy ${r.haproxyVersion} (${r.version}), ${label(r)}`,
        '',
        ...(r.guard
          ? [
              `The guard in the frontend the Data Plane API provider wrote, against the stock provider's lines for the same settings: ${r.guard.differences.length === 0 ? `the same ${r.guard.stock.length} lines` : r.guard.differences.join('; ')}${r.guard.sameOrder ? ', in the same order' : ', in another order'} (stick-table size and expiry read as numbers).`,
              '',
            ]
          : []),
        `${r.date.slice(0, 16)}Z; global maxconn ${v(r.maxconn)} (ulimit-n ${v(r.ulimitN)}), SNI frontend limit ${v(r.frontendLimit)}. ` +
          `Watch streams cut during the run: ${r.watchCuts.length === 0 ? 'none' : r.watchCuts.map((c) => `${c.stream} after ${c.openForMs} ms: ${c.reason}`).join('; ')}.`,
        '',
        '| attack | legit attempted / failed | p50 / p99 / max ms | TCP connect p50 / p99 ms | attacker achieved | HAProxy | back to baseline | load | bench stalls ms |',
        '| --- | --- | --- | --- | --- | --- | --- | --- | --- |',
      );
      for (const p of r.phases) {
        const name =
          p.phase === 'baseline'
            ? 'none (baseline)'
            : (ATTACK_NAMES[p.phase as keyof typeof ATTACK_NAMES] ?? p.phase);
        lines.push(
          `| ${name} | ${legitCell(p)} | ${v(p.legit.p50)} / ${v(p.legit.p99)} / ${v(p.legit.max)} | ${v(p.legit.connectP50)} / ${v(p.legit.connectP99)} | ${attackerCell(p)} | ${haproxyCell(p)} | ${p.recoveryMs === null ? '—' : `${(p.recoveryMs / 1000).toFixed(1)} s`} | ${p.load1?.toFixed(1) ?? '—'} | ${v(p.legit.loopMaxMs)} / ${v(p.backendLoop?.maxMs)} |`,
        );
      }
      lines.push('');
    }
  }
  lines.push(...summaryTable(results));
  return `${lines.join('\n')}\n`;
}

const rank = (c: string) => (c === 'before' ? 0 : c === 'after' ? 1 : 2);

/** One row per attack: before and after, per version: failed handshakes and p99. */
function summaryTable(results: RunResult[]): string[] {
  const versions = [...new Set(results.map((r) => r.version))].sort();
  const attacks = [...new Set(results.flatMap((r) => r.phases.map((p) => p.phase)))];
  const configs = [...new Set(results.map(label))].sort((a, b) => rank(a) - rank(b) || a.localeCompare(b));
  const cell = (version: string, config: string, phase: string) => {
    const p = results
      .find((r) => r.version === version && label(r) === config)
      ?.phases.find((x) => x.phase === phase);
    if (!p) return '—';
    return `${p.legit.failed}/${p.legit.attempted} failed, p99 ${v(p.legit.p99)} ms, RSS ≤ ${mb(p.haproxy.rssMaxKiB)} MB`;
  };
  const out = [
    '## Summary: legit handshakes failed / attempted, p99, HAProxy worker RSS max',
    '',
    `| attack | ${versions.flatMap((x) => configs.map((c) => `${x} ${c}`)).join(' | ')} |`,
    `| --- | ${versions.flatMap(() => configs.map(() => '---')).join(' | ')} |`,
  ];
  for (const a of attacks) {
    const name = a === 'baseline' ? 'none (baseline)' : (ATTACK_NAMES[a as keyof typeof ATTACK_NAMES] ?? a);
    out.push(`| ${name} | ${versions.flatMap((x) => configs.map((c) => cell(x, c, a))).join(' | ')} |`);
  }
  out.push('');
  return out;
}
