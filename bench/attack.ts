/**
 * Issue 33, part 3: the public SNI frontend under attack, measured on a real HAProxy with a legitimate TLS
 * client connecting throughout:
 *
 *   npx tsx bench/attack.ts [--haproxy 2.6,3.0,3.2] [--config before,after] [--provider stock|dataplaneapi]
 *                           [--attacks no-hello-flood,random-sni,slow-hello,idle-15k,idle-after-tls,refused-network]
 *                           [--baseline-s 10] [--scale 1] [--out bench/results]
 *                           [--max-conn-per-source N] [--max-rate-per-source N]
 *
 * Per version and configuration, on a fresh test bed (see bench/attack/bed.ts): a baseline, then each attack
 * from 127.0.0.1 while a kubectl-like client on 127.0.0.2 does one TLS handshake with SNI every 50 ms (to the
 * open cluster and to the one restricted to 127.0.0.2/32, in turn) and holds two watch streams
 * (bench/attack/roles.ts). `after` is the owned file exactly as the stock provider writes it with the default
 * settings (the guard of src/haproxy/edge.ts; `--max-conn-per-source`/`--max-rate-per-source` render other
 * values, as KUBEBYON_HAPROXY_MAX_CONN_PER_SOURCE/_MAX_CONN_RATE_PER_SOURCE would, 0 = not written); `before` the same file with the SNI frontend as written before
 * the guard. `--provider dataplaneapi` (with KUBEBYON_TEST_DATAPLANEAPI_BIN; `after` only) has the Data Plane
 * API provider write the configuration instead, and compares its guard with the stock provider's lines. Records the legitimate handshakes (attempted, failed,
 * p50/p99/max), what the attacker achieved, and HAProxy's connections, worker RSS, stick table and denials.
 * Writes <out>/attack.json and attack.md after every run (results of other versions/configs are kept).
 *
 * Everything is on loopback; every attack is bounded in connections and in time (at most 60 s each, see
 * ATTACKS in bench/attack/run.ts). The idle attack holds 15,000 sockets: the bench needs RLIMIT_NOFILE above
 * that (this machine's is 20,000; otherwise run it under `prlimit --nofile=20000:20000`). Test-bed containers
 * carry the label kubebyon.testbed and are removed at the end.
 *
 * `--mode kubectl-peak [--kubectl <bin>]` measures what a real kubectl costs one source in the hardened
 * frontend's stick table (a real kube-apiserver behind HAProxy; bench/attack/kubectl-peak.ts) and writes
 * <out>/attack-kubectl-peak.{json,md}.
 *
 * `--mode dataplaneapi [--api-version v3.4.0]` checks the draft's hand-written Data Plane API objects
 * (bench/attack/harden.ts) against the v3.0.23, v3.2.15 and v3.4 documents and, with
 * KUBEBYON_TEST_DATAPLANEAPI_BIN, sends them to a real API (bench/attack/dataplaneapi-check.ts); writes
 * <out>/attack-dataplaneapi.{json,md}. What the provider itself writes: `--provider dataplaneapi`.
 *
 * `--mode report` writes <out>/attack.md again from <out>/attack.json.
 *
 * `--mode table-memory` fills the hardened frontend's stick table through the runtime API and reads the worker's
 * RSS before and after (bench/attack/table-memory.ts); writes <out>/attack-table-memory.json.
 *
 * `--mode timeouts` instead checks which timeout closes what on each version (bench/attack/timeouts.ts) and
 * writes <out>/attack-timeouts.{json,md}.
 *
 * `--role backend|legit|attacker --params <json>` is how the bench starts its own child processes.
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { cpus, totalmem } from 'node:os';
import { join } from 'node:path';
import { type AttackKind, attackerRole, backendRole, legitRole } from './attack/roles.js';
import type { RunResult } from './attack/run.js';
import { arg, list, REPO, useLoopbackTestcontainers } from './compare/cli.js';

const role = arg('role', '');
if (role) {
  const params = JSON.parse(arg('params', '{}'));
  if (role === 'backend') backendRole(params.maxMs);
  else if (role === 'legit') legitRole(params);
  else if (role === 'attacker') attackerRole(params);
  else throw new Error(`unknown role ${role}`);
} else {
  await main();
}

function nofileLimit(): number {
  const m = /Max open files\s+([0-9]+)/.exec(readFileSync('/proc/self/limits', 'utf8'));
  return m ? Number(m[1]) : 0;
}

async function main(): Promise<void> {
  // Loaded here only: the child processes need none of it.
  const { isHaproxyVersion, sweepTestbedContainers } = await import('../test/support/haproxy-testbed.js');
  const { DEFAULT_RENDER_OPTIONS } = await import('../src/haproxy/render.js');
  const { dataplaneSource } = await import('../test/support/dataplaneapi-testbed.js');
  const { markdown } = await import('./attack/report.js');
  const { ATTACKS, runOne } = await import('./attack/run.js');
  useLoopbackTestcontainers();
  const versions = list(arg('haproxy', '3.0'));
  for (const v of versions) if (!isHaproxyVersion(v)) throw new Error(`unknown HAProxy version ${v}`);
  const configs = list(arg('config', 'before,after'));
  for (const c of configs) if (c !== 'before' && c !== 'after') throw new Error(`unknown config ${c}`);
  const provider = arg('provider', 'stock');
  if (provider !== 'stock' && provider !== 'dataplaneapi') throw new Error(`unknown provider ${provider}`);
  const dataplane = provider === 'dataplaneapi' ? dataplaneSource() : undefined;
  if (provider === 'dataplaneapi' && (!dataplane || configs.join() !== 'after'))
    throw new Error('--provider dataplaneapi needs KUBEBYON_TEST_DATAPLANEAPI_BIN and --config after');
  const perSource = { ...DEFAULT_RENDER_OPTIONS.perSource };
  const perSourceArg = (name: string, field: 'maxConn' | 'maxRate') => {
    const text = arg(name, '');
    if (text === '') return false;
    const n = Number(text);
    if (!Number.isSafeInteger(n) || n < 0) throw new Error(`--${name} must be a whole number`);
    perSource[field] = n;
    return true;
  };
  const changed = [
    perSourceArg('max-conn-per-source', 'maxConn'),
    perSourceArg('max-rate-per-source', 'maxRate'),
  ].some(Boolean);
  if (changed && provider !== 'stock') throw new Error('other settings only with the stock provider');
  const overrides = changed ? { perSource } : undefined;
  const attacks = list(arg('attacks', Object.keys(ATTACKS).join(','))) as AttackKind[];
  for (const a of attacks) if (!(a in ATTACKS)) throw new Error(`unknown attack ${a}`);
  const baselineMs = Number(arg('baseline-s', '10')) * 1000;
  const scale = Number(arg('scale', '1'));
  if (!(scale > 0 && scale <= 1)) throw new Error('--scale must be in (0, 1]');
  const outDir = arg('out', join(REPO, 'bench/results'));
  if (attacks.includes('idle-15k') && nofileLimit() < 15_500)
    throw new Error(`RLIMIT_NOFILE is ${nofileLimit()}: run under prlimit --nofile=20000:20000`);

  const log = (line: string) => console.log(`[${new Date().toISOString().slice(11, 19)}] ${line}`);
  const mode = arg('mode', 'attacks');
  const modes = ['attacks', 'report', 'table-memory', 'dataplaneapi', 'timeouts', 'kubectl-peak'];
  if (!modes.includes(mode)) throw new Error(`unknown mode ${mode} (one of ${modes.join(', ')})`);
  if (mode === 'kubectl-peak') {
    const { kubectlPeak, kubectlPeakMarkdown } = await import('./attack/kubectl-peak.js');
    const r = await kubectlPeak(
      (versions[0] ?? '3.0') as RunResult['version'],
      arg('kubectl', '/var/cache/kubebyon-kube/bin/kubectl'),
    );
    for (const s of r.scenarios)
      log(`${s.name}: conn_cur ≤ ${s.connCurMax}, conn_rate ≤ ${s.connRateMax}, ${s.failed} failed`);
    writeFileSync(join(outDir, 'attack-kubectl-peak.json'), `${JSON.stringify(r, null, 1)}\n`);
    writeFileSync(join(outDir, 'attack-kubectl-peak.md'), kubectlPeakMarkdown(r));
    await sweepTestbedContainers();
    return;
  }
  if (mode === 'report') {
    // Writes attack.md again from attack.json (after a change to the report's layout).
    const d = JSON.parse(readFileSync(join(outDir, 'attack.json'), 'utf8'));
    writeFileSync(join(outDir, 'attack.md'), markdown(d.results, d.machine));
    return;
  }
  if (mode === 'table-memory') {
    const { tableMemory } = await import('./attack/table-memory.js');
    const out = [];
    for (const version of versions) {
      const r = await tableMemory(version as RunResult['version']);
      log(
        `${version}: ${r.used} entries used of ${r.size} (${r.inserted} set), RSS ${r.rssEmptyKiB} → ${r.rssFullKiB} KiB, ${r.bytesPerEntry} B per entry`,
      );
      out.push(r);
    }
    writeFileSync(join(outDir, 'attack-table-memory.json'), `${JSON.stringify(out, null, 1)}\n`);
    await sweepTestbedContainers();
    return;
  }
  if (mode === 'dataplaneapi') {
    const { dataplaneSource } = await import('../test/support/dataplaneapi-testbed.js');
    const { dataplaneMarkdown, liveCheck, schemaChecks } = await import('./attack/dataplaneapi-check.js');
    const schema = schemaChecks();
    for (const c of schema)
      log(`${c.api} ${c.request}: ${c.problems.length === 0 ? 'valid' : c.problems.join('; ')}`);
    const source = dataplaneSource();
    const live = [];
    if (source) {
      const api = arg('api-version', 'v3.4.0');
      for (const version of versions) {
        const r = await liveCheck(source, version as RunResult['version'], api);
        log(
          `${api} on ${r.haproxyVersion}: same as sent ${r.sameAsSent}, ${r.reachesCluster}, unknown SNI ${r.unknownSni}, held ${r.heldFromOneSource}, 4th refused ${r.fourthRefused}`,
        );
        live.push(r);
      }
    } else log('no Data Plane API given (KUBEBYON_TEST_DATAPLANEAPI_BIN): schema checks only');
    writeFileSync(join(outDir, 'attack-dataplaneapi.json'), `${JSON.stringify({ schema, live }, null, 1)}\n`);
    writeFileSync(join(outDir, 'attack-dataplaneapi.md'), dataplaneMarkdown(schema, live));
    await sweepTestbedContainers();
    return;
  }
  if (mode === 'timeouts') {
    await timeoutsMode(versions, outDir, log);
    await sweepTestbedContainers();
    return;
  }
  const machine = `${cpus().length} x ${cpus()[0]?.model.trim()}, ${Math.round(totalmem() / 2 ** 30)} GiB, Node ${process.version}, RLIMIT_NOFILE ${nofileLimit()}`;
  mkdirSync(outDir, { recursive: true });
  const jsonPath = join(outDir, 'attack.json');
  const previous: RunResult[] = (() => {
    try {
      return JSON.parse(readFileSync(jsonPath, 'utf8')).results ?? [];
    } catch {
      return [];
    }
  })();
  const key = (r: Pick<RunResult, 'version' | 'config' | 'provider' | 'overrides'>) =>
    `${r.version}|${r.config}|${r.provider ?? 'stock'}|${JSON.stringify(r.overrides ?? {})}`;
  const results = new Map(previous.map((r) => [key(r), r]));
  // The settings the adapter writes with no KUBEBYON_HAPROXY_* set (src/haproxy/render.ts).
  const settings = {
    maxConn: DEFAULT_RENDER_OPTIONS.maxConn,
    perSource: DEFAULT_RENDER_OPTIONS.perSource,
    inspectDelayMs: DEFAULT_RENDER_OPTIONS.inspectDelayMs,
  };
  const script = process.argv[1] as string;
  try {
    for (const version of versions)
      for (const config of configs) {
        log(`HAProxy ${version}, ${config}, ${provider} provider`);
        const r = await runOne({
          version: version as RunResult['version'],
          config: config as RunResult['config'],
          ...(dataplane ? { dataplane } : {}),
          ...(overrides ? { overrides } : {}),
          attacks,
          baselineMs,
          durationScale: scale,
          script,
          log,
        });
        if (r.guard)
          log(
            `  guard written by the Data Plane API provider: ${r.guard.differences.length === 0 ? "the stock provider's lines" : r.guard.differences.join('; ')} (same order: ${r.guard.sameOrder})`,
          );
        results.set(key(r), r);
        const all = [...results.values()];
        writeFileSync(jsonPath, `${JSON.stringify({ machine, settings, results: all }, null, 1)}\n`);
        writeFileSync(join(outDir, 'attack.md'), markdown(all, machine));
      }
  } finally {
    await sweepTestbedContainers();
  }
}

/** `--mode timeouts`: bench/attack/timeouts.ts on each version; writes <out>/attack-timeouts.{json,md}. */
async function timeoutsMode(versions: string[], outDir: string, log: (line: string) => void): Promise<void> {
  const { fork } = await import('node:child_process');
  const { runTimeouts, timeoutsMarkdown } = await import('./attack/timeouts.js');
  type Result = Awaited<ReturnType<typeof runTimeouts>>;
  const jsonPath = join(outDir, 'attack-timeouts.json');
  const previous: Result[] = (() => {
    try {
      return JSON.parse(readFileSync(jsonPath, 'utf8')).results ?? [];
    } catch {
      return [];
    }
  })();
  const results = new Map(previous.map((r) => [r.version, r]));
  for (const version of versions) {
    const backend = fork(process.argv[1] as string, ['--role', 'backend', '--params', '{"maxMs":600000}'], {
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    try {
      const port = await new Promise<number>((resolve, reject) => {
        backend.once('message', (m: { port?: number }) =>
          m.port ? resolve(m.port) : reject(new Error('no port')),
        );
        setTimeout(() => reject(new Error('the backend did not start')), 10_000);
      });
      log(`timeouts on HAProxy ${version}`);
      const r = await runTimeouts(version as Result['version'], port);
      for (const c of r.cases)
        log(`  ${c.variant} ${c.inspectDelayMs} ms: ${c.case}: ${c.closedAfterMs ?? 'open'} ${c.note}`);
      results.set(r.version, r);
    } finally {
      backend.kill('SIGKILL');
    }
    const all = [...results.values()].sort((a, b) => a.version.localeCompare(b.version));
    writeFileSync(jsonPath, `${JSON.stringify({ results: all }, null, 1)}\n`);
    writeFileSync(join(outDir, 'attack-timeouts.md'), timeoutsMarkdown(all));
  }
}
