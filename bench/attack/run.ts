/**
 * One run of the attack bench: one HAProxy version, one configuration (the SNI frontend before the guard, or as
 * the adapter writes it now), a fresh test bed, a baseline, then each attack in turn while the legitimate
 * client and its watch streams run throughout.
 */
import { type ChildProcess, fork } from 'node:child_process';
import { loadavg } from 'node:os';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseShowTable } from '../../src/haproxy/edge.js';
import { refusalsBackendFor } from '../../src/naming/names.js';
import type { DataplaneSource } from '../../test/support/dataplaneapi-testbed.js';
import type { HaproxyVersion } from '../../test/support/haproxy-testbed.js';
import { type AttackBed, HOST, RESTRICTED_HOST, type RenderOverrides, startAttackBed } from './bed.js';
import { type GuardCheck, startDataplaneAttackBed } from './bed-dataplane.js';
import type { AttackKind, AttackParams, AttackSummary, LegitParams, LegitSummary } from './roles.js';
import { num, parseEntry, parseInfo, parseTables, statRow } from './stats.js';

/** The refusals table (authorized networks), counted per slot. */
const REFUSALS = refusalsBackendFor();

export const ATTACKER = '127.0.0.1' as const;
export const LEGIT = '127.0.0.2';

/** Each attack's bounds: time, connections attempted, and how many are held or opened at once. */
export const ATTACKS: Record<AttackKind, Omit<AttackParams, 'kind' | 'port' | 'host' | 'source'>> = {
  // Connects as fast as it can, never sends a byte, drops each connection 1 s after it is established.
  'no-hello-flood': {
    durationMs: 30_000,
    maxAttempts: 600_000,
    concurrency: 256,
    hold: 15_000,
    churnMs: 1_000,
    byteIntervalMs: 0,
  },
  // A ClientHello with a random unknown SNI on each connection, 256 at a time, as fast as it goes.
  'random-sni': {
    durationMs: 30_000,
    maxAttempts: 600_000,
    concurrency: 256,
    hold: 256,
    churnMs: 0,
    byteIntervalMs: 0,
  },
  // 500 connections, each sending the real host's ClientHello one byte every 100 ms; reopened when closed.
  'slow-hello': {
    durationMs: 45_000,
    maxAttempts: 600_000,
    concurrency: 50,
    hold: 500,
    churnMs: 0,
    byteIntervalMs: 100,
  },
  // 15,000 idle connections held open (reopened when closed), never a byte.
  'idle-15k': {
    durationMs: 45_000,
    maxAttempts: 600_000,
    concurrency: 256,
    hold: 15_000,
    churnMs: 0,
    byteIntervalMs: 0,
  },
  // Real TLS handshakes with the real cluster's SNI, then idle; up to 10,000 held.
  'idle-after-tls': {
    durationMs: 60_000,
    maxAttempts: 600_000,
    concurrency: 64,
    hold: 10_000,
    churnMs: 0,
    byteIntervalMs: 0,
  },
  // From outside the restricted cluster's authorized networks: its whole ClientHello on each connection, 256
  // at a time, hanging up at the first byte back or when HAProxy closes; as fast as it goes.
  'refused-network': {
    durationMs: 30_000,
    maxAttempts: 600_000,
    concurrency: 256,
    hold: 256,
    churnMs: 0,
    byteIntervalMs: 0,
  },
};

/** Attacker processes per attack. */
export const WORKERS: Record<AttackKind, number> = {
  'no-hello-flood': 2,
  'random-sni': 2,
  'slow-hello': 1,
  'idle-15k': 2,
  'idle-after-tls': 2,
  'refused-network': 2,
};

/**
 * The workers' summaries as one: counts summed, held at once from the summed per-second timeline, HAProxy's
 * closing times from the slowest worker's percentiles.
 */
export function mergeSummaries(list: AttackSummary[]): AttackSummary | null {
  const [first, ...rest] = list;
  if (!first) return null;
  const out: AttackSummary = structuredClone(first);
  for (const s of rest) {
    out.ranMs = Math.max(out.ranMs, s.ranMs);
    out.attempts += s.attempts;
    out.established += s.established;
    out.closedByHaproxy += s.closedByHaproxy;
    out.closedByAttacker += s.closedByAttacker;
    out.bytesReceived += s.bytesReceived;
    out.tlsHandshakes += s.tlsHandshakes;
    out.hellosCompleted += s.hellosCompleted;
    out.answered += s.answered;
    for (const [k, n] of Object.entries(s.connectErrors))
      out.connectErrors[k] = (out.connectErrors[k] ?? 0) + n;
    const w = out.closedByHaproxyWithinMs;
    const x = s.closedByHaproxyWithinMs;
    const mx = (a: number | null, b: number | null) => (a === null ? b : b === null ? a : Math.max(a, b));
    out.closedByHaproxyWithinMs = { p50: mx(w.p50, x.p50), p99: mx(w.p99, x.p99), max: mx(w.max, x.max) };
    out.timeline = out.timeline.map((t, i) => {
      const o = s.timeline[i];
      return o
        ? {
            s: t.s,
            attempts: t.attempts + o.attempts,
            established: t.established + o.established,
            held: t.held + o.held,
          }
        : t;
    });
  }
  out.workers = list.length;
  // Held at once across workers: the largest per-second total (at least any one worker's own maximum).
  if (rest.length > 0)
    out.heldMax = Math.max(...list.map((s) => s.heldMax), ...out.timeline.map((t) => t.held));
  return out;
}

export const ATTACK_NAMES: Record<AttackKind, string> = {
  'no-hello-flood': 'connection flood, no ClientHello',
  'random-sni': 'ClientHellos with random unknown SNI',
  'slow-hello': 'slow ClientHello (500 conns, 1 byte / 100 ms)',
  'idle-15k': '15,000 idle connections held',
  'idle-after-tls': 'TLS completed to a real cluster, then idle',
  'refused-network': "ClientHellos from outside a cluster's authorized networks",
};

/** The host each attack aims at. */
const TARGET: Record<AttackKind, string> = {
  'no-hello-flood': HOST,
  'random-sni': HOST,
  'slow-hello': HOST,
  'idle-15k': HOST,
  'idle-after-tls': HOST,
  'refused-network': RESTRICTED_HOST,
};

export interface HaproxyPhase {
  samples: number;
  cliTimeouts: number;
  currConnsMax: number | null;
  scurMax: number | null;
  slim: number | null;
  rssStartKiB: number | null;
  rssMaxKiB: number | null;
  rssEndKiB: number | null;
  /** CPU time the worker used during the phase (ms; 2 cores: up to 2,000 ms per second). */
  cpuMs: number | null;
  poolUsedMaxMB: number | null;
  dconDelta: number | null;
  dreqDelta: number | null;
  stotDelta: number | null;
  connRateMax: number | null;
  tableUsedMax: number | null;
  attackerEntryMax: { conn_cur: number; conn_rate: number } | null;
  legitEntryMax: { conn_cur: number; conn_rate: number } | null;
  /** Connections refused for authorized networks during the phase (the refusals table's counts, summed). */
  refusedDelta: number | null;
}

export interface PhaseResult {
  phase: string;
  legit: LegitSummary;
  attacker: AttackSummary | null;
  haproxy: HaproxyPhase;
  /** After the attack: ms until HAProxy's connections were back to the baseline's (bounded at 30 s). */
  recoveryMs: number | null;
  /** The machine's 1-minute load average at the end of the phase (2 cores; other work shares them). */
  load1: number;
  /** The TLS backend process's event-loop delay during the phase (ms): stalls there are the bench's own. */
  backendLoop: { maxMs: number; p99Ms: number } | null;
}

export interface RunResult {
  version: HaproxyVersion;
  haproxyVersion: string;
  config: 'before' | 'after';
  /** Which provider wrote the configuration (absent in results of earlier revisions: stock). */
  provider?: 'stock' | 'dataplaneapi';
  /** Settings other than the defaults, when the run had any. */
  overrides?: RenderOverrides;
  /** Data Plane API runs: the guard HAProxy runs against the lines the stock provider writes. */
  guard?: GuardCheck;
  date: string;
  maxconn: number | null;
  ulimitN: number | null;
  frontendLimit: number | null;
  phases: PhaseResult[];
  /** Watch-stream cuts over the whole run (baseline, attacks, recoveries). */
  watchCuts: LegitSummary['cuts'];
  frontend: string;
}

type Log = (line: string) => void;

/** A child process of this bench (`bench/attack.ts --role …`), with typed messages. */
class Child {
  private readonly proc: ChildProcess;
  private readonly waiting: Array<{ key: string; resolve: (v: unknown) => void }> = [];
  readonly exited: Promise<void>;
  onProgress: (p: unknown) => void = () => {};

  constructor(script: string, role: string, params: unknown) {
    this.proc = fork(script, ['--role', role, '--params', JSON.stringify(params)], {
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    this.exited = new Promise((resolve) => this.proc.once('exit', () => resolve()));
    this.proc.on('message', (m: Record<string, unknown>) => {
      if ('progress' in m) this.onProgress(m.progress);
      for (const [key, value] of Object.entries(m)) {
        const i = this.waiting.findIndex((w) => w.key === key);
        if (i >= 0) this.waiting.splice(i, 1)[0]?.resolve(value);
      }
    });
  }

  next<T>(key: string, timeoutMs: number): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error(`no "${key}" from the child in ${timeoutMs} ms`)),
        timeoutMs,
      );
      this.waiting.push({
        key,
        resolve: (v) => {
          clearTimeout(timer);
          resolve(v as T);
        },
      });
    });
  }

  send(m: unknown): void {
    if (this.proc.connected) this.proc.send(m as object);
  }

  async kill(): Promise<void> {
    if (this.proc.exitCode === null && this.proc.signalCode === null) this.proc.kill('SIGKILL');
    await this.exited;
  }
}

const within = <T>(p: Promise<T>, ms: number): Promise<T | null> =>
  Promise.race([p.catch(() => null), sleep(ms).then(() => null)]);

interface Sample {
  info: Record<string, string> | null;
  stat: Record<string, string> | null;
  tables: ReturnType<typeof parseTables> | null;
  attacker: Record<string, number> | null;
  legit: Record<string, number> | null;
  refused: number | null;
  rss: number | null;
  cpuMs: number | null;
}

async function sample(bed: AttackBed, hardened: boolean): Promise<Sample> {
  const [info, stat, tables, attacker, legit, refusals, rss, cpuMs] = await Promise.all([
    within(bed.cli('show info'), 5_000),
    within(bed.cli('show stat'), 5_000),
    hardened ? within(bed.cli('show table'), 5_000) : null,
    hardened ? within(bed.cli(`show table kubebyon_sni key ::ffff:${ATTACKER}`), 5_000) : null,
    hardened ? within(bed.cli(`show table kubebyon_sni key ::ffff:${LEGIT}`), 5_000) : null,
    hardened ? within(bed.cli(`show table ${REFUSALS}`), 5_000) : null,
    bed.workerRssKiB().catch(() => null),
    bed.workerCpuMs().catch(() => null),
  ]);
  return {
    info: info ? parseInfo(info) : null,
    stat: stat ? statRow(stat, 'kubebyon_sni') : null,
    tables: tables ? parseTables(tables) : null,
    attacker: attacker ? parseEntry(attacker) : null,
    legit: legit ? parseEntry(legit) : null,
    refused: refusals === null ? null : [...parseShowTable(refusals).values()].reduce((a, b) => a + b, 0),
    rss,
    cpuMs,
  };
}

function poolUsedMB(info: Record<string, string> | null): number | null {
  if (!info) return null;
  const bytes = num(info.PoolUsed_bytes);
  if (bytes !== null) return Math.round(bytes / 2 ** 20);
  return num(info.PoolUsed_MB);
}

function summarizeSamples(samples: Sample[], first: Sample): HaproxyPhase {
  const max = (xs: Array<number | null>) => {
    const v = xs.filter((x): x is number => x !== null);
    return v.length ? Math.max(...v) : null;
  };
  const last = samples[samples.length - 1] ?? first;
  const delta = (key: string) => {
    const a = num(first.stat?.[key]);
    const b = max(samples.map((s) => num(s.stat?.[key])));
    return a === null || b === null ? null : b - a;
  };
  const entryMax = (pick: (s: Sample) => Record<string, number> | null) => {
    const es = samples.map(pick).filter((e): e is Record<string, number> => e !== null);
    if (es.length === 0) return null;
    return {
      conn_cur: Math.max(...es.map((e) => e.conn_cur ?? 0)),
      conn_rate: Math.max(...es.map((e) => e.conn_rate ?? 0)),
    };
  };
  return {
    samples: samples.length,
    cliTimeouts: samples.filter((s) => s.info === null).length,
    currConnsMax: max(samples.map((s) => num(s.info?.CurrConns))),
    scurMax: max(samples.map((s) => num(s.stat?.scur))),
    slim: num(last.stat?.slim ?? first.stat?.slim),
    rssStartKiB: first.rss,
    rssMaxKiB: max(samples.map((s) => s.rss)),
    rssEndKiB: last.rss,
    cpuMs: first.cpuMs === null || last.cpuMs === null ? null : last.cpuMs - first.cpuMs,
    poolUsedMaxMB: max(samples.map((s) => poolUsedMB(s.info))),
    dconDelta: delta('dcon'),
    dreqDelta: delta('dreq'),
    stotDelta: delta('stot'),
    connRateMax: max(samples.map((s) => num(s.stat?.conn_rate))),
    tableUsedMax: max(samples.map((s) => s.tables?.find((t) => t.name === 'kubebyon_sni')?.used ?? null)),
    attackerEntryMax: entryMax((s) => s.attacker),
    legitEntryMax: entryMax((s) => s.legit),
    refusedDelta: (() => {
      const b = max(samples.map((s) => s.refused));
      return first.refused === null || b === null ? null : b - first.refused;
    })(),
  };
}

/** The backend's event-loop delay since the last ask (and reset). */
async function backendLoop(backend: Child): Promise<{ maxMs: number; p99Ms: number } | null> {
  backend.send({ stats: true });
  const s = await within(backend.next<{ loopMaxMs: number; loopP99Ms: number }>('stats', 5_000), 6_000);
  return s ? { maxMs: s.loopMaxMs, p99Ms: s.loopP99Ms } : null;
}

export interface RunOptions {
  version: HaproxyVersion;
  config: 'before' | 'after';
  /** The Data Plane API binary to write the configuration through (config "after" only); unset: the stock provider. */
  dataplane?: DataplaneSource;
  /** Settings other than the defaults (stock provider). */
  overrides?: RenderOverrides;
  attacks: AttackKind[];
  baselineMs: number;
  /** Scales every attack's duration (1 = the durations above). */
  durationScale: number;
  script: string;
  log: Log;
}

export async function runOne(o: RunOptions): Promise<RunResult> {
  const { log } = o;
  const backend = new Child(o.script, 'backend', { maxMs: 3 * 3600_000 });
  let bed: (AttackBed & { guard?: GuardCheck }) | undefined;
  let legit: Child | undefined;
  let attackers: Child[] = [];
  try {
    const backendPort = await backend.next<number>('port', 10_000);
    bed = o.dataplane
      ? await startDataplaneAttackBed(o.dataplane, o.version, backendPort)
      : await startAttackBed(o.version, backendPort, o.overrides);
    await bed.load(o.config);
    const hardened = o.config === 'after';
    const info = parseInfo(await bed.cli('show info'));
    const stat = statRow(await bed.cli('show stat'), 'kubebyon_sni');
    const frontend = bed.owned.split('\n\n').find((s) => /^frontend kubebyon_sni\b/.test(s)) ?? '';
    log(
      `HAProxy ${info.Version} ${o.config}: maxconn ${info.Maxconn}, ulimit-n ${info['Ulimit-n']}, frontend slim ${stat?.slim}`,
    );
    const legitParams: LegitParams = {
      port: bed.port,
      host: HOST,
      probeHosts: [HOST, RESTRICTED_HOST],
      localAddress: LEGIT,
      intervalMs: 50,
      timeoutMs: 10_000,
      activeWatchEveryMs: 3_000,
      idleWatchEveryMs: 40_000,
      maxMs: 3 * 3600_000,
    };
    legit = new Child(o.script, 'legit', legitParams);
    await legit.next('ready', 10_000);
    await sleep(2_000);

    const phases: PhaseResult[] = [];
    const samplesDuring = async (until: () => boolean, maxMs: number): Promise<Sample[]> => {
      const out: Sample[] = [];
      const deadline = Date.now() + maxMs;
      while (!until() && Date.now() < deadline) {
        const t = Date.now();
        out.push(await sample(bed as AttackBed, hardened));
        await sleep(Math.max(0, 1_000 - (Date.now() - t)));
      }
      return out;
    };

    // Baseline: no attack.
    legit.send({ phase: 'baseline' });
    const first = await sample(bed, hardened);
    const start = Date.now();
    const baseSamples = await samplesDuring(() => Date.now() - start >= o.baselineMs, o.baselineMs + 5_000);
    legit.send({ phase: 'between' });
    const baseBackend = await backendLoop(backend);
    legit.send({ report: 'baseline' });
    const baseLegit = await legit.next<LegitSummary>('report', 10_000);
    const baseHaproxy = summarizeSamples(baseSamples, first);
    phases.push({
      phase: 'baseline',
      legit: baseLegit,
      attacker: null,
      haproxy: baseHaproxy,
      recoveryMs: null,
      load1: loadavg()[0] as number,
      backendLoop: baseBackend,
    });
    const baselineConns = baseHaproxy.currConnsMax ?? 10;
    log(`  baseline: legit p50 ${baseLegit.p50} p99 ${baseLegit.p99} ms, ${baseLegit.failed} failed`);

    for (const kind of o.attacks) {
      const bounds = ATTACKS[kind];
      // The attack is split over `workers` processes (each its share of every bound): one Node process does not
      // open connections fast enough on 2 shared cores.
      const workers = WORKERS[kind];
      const share = (n: number) => Math.ceil(n / workers);
      const params: AttackParams = {
        ...bounds,
        maxAttempts: share(bounds.maxAttempts),
        concurrency: share(bounds.concurrency),
        hold: share(bounds.hold),
        durationMs: Math.round(bounds.durationMs * o.durationScale),
        kind,
        port: bed.port,
        host: TARGET[kind],
        source: ATTACKER,
      };
      const before = await sample(bed, hardened);
      await backendLoop(backend);
      legit.send({ phase: kind });
      attackers = Array.from({ length: workers }, () => new Child(o.script, 'attacker', params));
      const summaries: AttackSummary[] = [];
      const finished = Promise.all(
        attackers.map((a) =>
          a.next<AttackSummary>('done', params.durationMs + 40_000).then(
            (s) => {
              summaries.push(s);
            },
            () => {},
          ),
        ),
      );
      let allDone = false;
      void finished.then(() => {
        allDone = true;
      });
      const during = await samplesDuring(() => allDone, params.durationMs + 40_000);
      await finished;
      await Promise.all(attackers.map((a) => a.kill()));
      attackers = [];
      const done = mergeSummaries(summaries);
      const attackBackend = await backendLoop(backend);
      // Recovery: until HAProxy holds no more than the baseline's connections (bounded).
      legit.send({ phase: `after ${kind}` });
      const t0 = Date.now();
      let recoveryMs: number | null = null;
      for (let i = 0; i < 60; i++) {
        const s = await sample(bed, hardened);
        const cur = num(s.info?.CurrConns);
        if (cur !== null && cur <= baselineConns + 5) {
          recoveryMs = Date.now() - t0;
          break;
        }
        await sleep(500);
      }
      // Each attack starts from a clean slate: the attacker's stick-table entry (its connection rate) cleared.
      if (hardened) {
        await within(bed.cli(`clear table kubebyon_sni key ::ffff:${ATTACKER}`), 5_000);
        for (let i = 0; i < 20; i++) {
          const e = parseEntry(
            (await within(bed.cli(`show table kubebyon_sni key ::ffff:${ATTACKER}`), 5_000)) ?? '',
          );
          if (!e || (e.conn_rate ?? 0) === 0) break;
          await sleep(1_000);
          await within(bed.cli(`clear table kubebyon_sni key ::ffff:${ATTACKER}`), 5_000);
        }
      }
      legit.send({ report: kind });
      const legitSummary = await legit.next<LegitSummary>('report', 20_000);
      const haproxy = summarizeSamples(during, before);
      phases.push({
        phase: kind,
        legit: legitSummary,
        attacker: done,
        haproxy,
        recoveryMs,
        load1: loadavg()[0] as number,
        backendLoop: attackBackend,
      });
      const a = done;
      log(
        `  ${kind}: legit ${legitSummary.attempted} attempted, ${legitSummary.failed} failed, p50 ${legitSummary.p50} p99 ${legitSummary.p99} max ${legitSummary.max} ms; ` +
          `attacker ${a?.attempts} attempts, ${a?.established} established, held max ${a?.heldMax}; HAProxy conns max ${haproxy.currConnsMax}, RSS max ${haproxy.rssMaxKiB} KiB, dcon +${haproxy.dconDelta}, dreq +${haproxy.dreqDelta}, refused +${haproxy.refusedDelta}, CPU ${haproxy.cpuMs} ms; answered ${a?.answered}; recovered in ${recoveryMs} ms`,
      );
      await sleep(1_000);
    }
    // Every phase's watch-stream cuts (the recoveries' too).
    const names = ['baseline', 'between', ...o.attacks.flatMap((k) => [k, `after ${k}`])];
    const cuts: LegitSummary['cuts'] = [];
    for (const name of names) {
      legit.send({ report: name });
      const r = await legit.next<LegitSummary>('report', 10_000);
      cuts.push(...r.cuts.map((c) => ({ ...c, reason: `${c.reason} (during ${name})` })));
    }
    return {
      version: o.version,
      haproxyVersion: info.Version ?? '',
      config: o.config,
      provider: bed.provider,
      ...(o.overrides && Object.keys(o.overrides).length > 0 ? { overrides: o.overrides } : {}),
      ...(bed.guard ? { guard: bed.guard } : {}),
      date: new Date().toISOString(),
      maxconn: num(info.Maxconn),
      ulimitN: num(info['Ulimit-n']),
      frontendLimit: num(stat?.slim),
      phases,
      watchCuts: cuts,
      frontend,
    };
  } finally {
    await Promise.all(attackers.map((a) => a.kill()));
    if (legit) {
      legit.send({ stop: true });
      await within(legit.next('stopped', 5_000), 5_000);
      await legit.kill();
    }
    await bed?.stop();
    await backend.kill();
  }
}
