/**
 * One change at N clusters to routable on EVERY HAProxy instance, with 1 and with 3 instances driven by one
 * service (`KUBEBYON_HAPROXY_INSTANCES`, map routing, static topology 127.0.0.1):
 *
 *   npx tsx bench/instances.ts [--instances 1,3] [--n 1000] [--changes 40] [--provider haproxy|dataplaneapi]
 *                              [--haproxy 3.0] [--out bench/results]
 *
 * Per instance count, on fresh HAProxy beds (host networking, loopback): N clusters in one request
 * (`?wait=true`), then `--changes` single changes one at a time, in turn a new cluster, an endpoint move of a
 * loaded one and a delete of another, each timed from its signed webhook (`?wait=true`: answered once every
 * instance applied it) being sent to the TLS handshake by SNI that proves it (or, for a delete, the first
 * refused one) on every instance, all instances polled at once after the answer. Also: the spread (slowest instance less the fastest), HAProxy's reloads (master
 * `show proc`, per instance) and the service's RSS. `dataplaneapi` needs KUBEBYON_TEST_DATAPLANEAPI_BIN (or
 * _IMAGE). Writes <out>/instances.json and instances.md after every run. Build first (`npm run build`).
 */
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, tmpdir, totalmem } from 'node:os';
import { basename, join, resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseShowProc } from '../src/providers/haproxy/runtime-text.js';
import {
  type DataplaneSource,
  DPAPI_USER,
  dataplaneSource,
  foreignConfig,
  startDataplaneTestbed,
} from '../test/support/dataplaneapi-testbed.js';
import { type HaproxyVersion, sweepTestbedContainers } from '../test/support/haproxy-testbed.js';
import { freeLoopbackPort } from '../test/support/ports.js';
import { arg, list, REPO, useLoopbackTestcontainers } from './compare/cli.js';
import { probe, startIdentityServers } from './compare/identity.js';
import { type Resources, startService } from './compare/service.js';
import { startTarget } from './compare/targets.js';
import { imageNodeOptions, type Latencies, latencies, untilClosed } from './zero-reload/run.js';

useLoopbackTestcontainers();
const source = dataplaneSource();
const provider = arg('provider', 'haproxy');
if (provider !== 'haproxy' && provider !== 'dataplaneapi') throw new Error(`unknown provider ${provider}`);
if (provider === 'dataplaneapi' && !source)
  throw new Error('--provider dataplaneapi needs KUBEBYON_TEST_DATAPLANEAPI_BIN or _IMAGE');
const counts = list(arg('instances', '1,3')).map(Number);
const n = Number(arg('n', '1000'));
const changes = Number(arg('changes', '40'));
const version = arg('haproxy', '3.0') as HaproxyVersion;
const outDir = resolve(REPO, arg('out', 'bench/results'));
const ADDRESS = '127.0.0.1';
const DOMAIN = 'inst.example.com';
const CHANGE_DEADLINE_MS = 30_000;

/** Per change kind: latencies to routable everywhere, and the spread between instances (both in ms). */
interface KindResult extends Latencies {
  spreadP50: number | null;
  spreadMax: number | null;
}

interface InstancesResult {
  provider: string;
  slots?: string;
  instances: number;
  n: number;
  /** N clusters in one `PUT /v1/clusters?wait=true`, and a sample of them then routable on every instance. */
  load: { putAllMs: number; sampled: number; missing: number };
  add: KindResult;
  move: KindResult;
  remove: KindResult;
  /** HAProxy's reloads during the single changes, per instance (h0, h1, …). */
  reloads: number[];
  resources: Resources;
  date: string;
  versions: Record<string, string>;
  /** The host's 1-minute load average before and after the run: others' work on it makes numbers noisy. */
  load1: [number, number];
  error?: string;
}

/** One HAProxy instance: its SNI port, its reload count, its `KUBEBYON_HAPROXY_INSTANCES` entry. */
interface Bed {
  sniPort: number;
  loads(): Promise<number>;
  version(): Promise<string>;
  entry(name: string): Record<string, unknown>;
  stop(): Promise<void>;
}

const loadsOf = (masterCli: (c: string) => Promise<string>) => async () => {
  const proc = parseShowProc(await masterCli('show proc'));
  return proc.reloads - proc.failed;
};
const versionOf = (masterCli: (c: string) => Promise<string>) => async () =>
  parseShowProc(await masterCli('show proc')).version;

async function startBed(password: string): Promise<Bed> {
  if (provider === 'haproxy') {
    const t = await startTarget('haproxy', version, undefined);
    const s = t.stock;
    if (!s) throw new Error('the stock target has no owned file');
    return {
      sniPort: t.sniPort,
      loads: t.loads,
      version: versionOf(t.masterCli),
      entry: (name) => ({
        name,
        masterSocket: s.masterSocket,
        ownedFile: s.ownedFile,
        checkFiles: s.checkFiles,
        haproxyBin: s.haproxyBin,
        bind: `${ADDRESS}:${t.sniPort}`,
      }),
      stop: t.stop,
    };
  }
  // One set of credentials for every instance: the list gives each its URL only.
  const config = foreignConfig({ consolePort: await freeLoopbackPort(), consoleBackendPort: 9 });
  const tb = await startDataplaneTestbed(source as DataplaneSource, version, config, { password });
  const sniPort = await freeLoopbackPort();
  return {
    sniPort,
    loads: loadsOf(tb.masterCli),
    version: versionOf(tb.masterCli),
    entry: (name) => ({ name, url: tb.url, bind: `${ADDRESS}:${sniPort}` }),
    stop: () => tb.stop(),
  };
}

function serviceEnv(beds: Bed[], dir: string, password: string): Record<string, string> {
  const providerEnv: Record<string, string> =
    provider === 'haproxy'
      ? { KUBEBYON_PROVIDER: 'haproxy', KUBEBYON_HAPROXY_RELOAD_TIMEOUT_MS: '600000' }
      : {
          KUBEBYON_PROVIDER: 'dataplaneapi',
          KUBEBYON_DATAPLANE_USERNAME: DPAPI_USER,
          KUBEBYON_DATAPLANE_PASSWORD: password,
          KUBEBYON_DATAPLANE_TIMEOUT_MS: '600000',
          KUBEBYON_HAPROXY_RELOAD_TIMEOUT_MS: '600000',
          // As the zero-reload bench and the deployment guide run it (Data Plane API v3.4+).
          KUBEBYON_DATAPLANE_SLOTS: process.env.BENCH_DATAPLANE_SLOTS ?? 'storage',
        };
  return {
    ...providerEnv,
    KUBEBYON_HAPROXY_INSTANCES: JSON.stringify(beds.map((b, i) => b.entry(`h${i}`))),
    KUBEBYON_TOPOLOGY: 'static',
    KUBEBYON_STATIC_NODE_ADDRESSES: ADDRESS,
    KUBEBYON_STATE_FILE: join(dir, 'clusters.json'),
    KUBEBYON_LOG_LEVEL: 'warn',
    KUBEBYON_PUBLIC_PORT: String(beds[0]?.sniPort),
    // N servers probing a handful of stand-ins would measure the stand-ins.
    KUBEBYON_HAPROXY_HEALTH_CHECKS: 'false',
    KUBEBYON_RESYNC_INTERVAL_MS: '0',
    KUBEBYON_WEBHOOK_BODY_LIMIT_BYTES: String(32 * 1024 * 1024),
    KUBEBYON_WAIT_TIMEOUT_MS: '600000',
    KUBEBYON_SHUTDOWN_GRACE_MS: '60000',
    NODE_OPTIONS: imageNodeOptions(),
    // Experiments: `BENCH_SERVICE_ENV='KUBEBYON_LOG_LEVEL=debug,…'` overrides the service's settings.
    ...Object.fromEntries(
      (process.env.BENCH_SERVICE_ENV ?? '')
        .split(',')
        .filter(Boolean)
        .map((kv) => [kv.slice(0, kv.indexOf('=')), kv.slice(kv.indexOf('=') + 1)]),
    ),
  };
}

const round1 = (x: number | undefined) => Math.round((x ?? 0) * 10) / 10;
const pad = (i: number) => String(i).padStart(5, '0');
const body = (host: string, nodePort: number) => ({
  control_plane_host: host,
  public_access_mode: 'loadbalancer',
  node_port: nodePort,
});

/**
 * Probes until `host` answers with `expected`: ms since `since`, or null past `deadline`. Every 2 ms like
 * `untilClosed` (not `until`'s 15 ms), so that the spread between instances is not one poll interval.
 */
async function routable(port: number, host: string, expected: string, since: number, deadline: number) {
  for (;;) {
    if ((await probe(port, host, 1_000)) === expected) return performance.now() - since;
    if (Date.now() > deadline) return null;
    await sleep(2);
  }
}

function kindResult(samples: Array<number | null>, spreads: number[], reloads: number): KindResult {
  const s = latencies(spreads, 0);
  return { ...latencies(samples, reloads), spreadP50: s.p50, spreadMax: s.max };
}

async function runOne(count: number, ports: number[]): Promise<InstancesResult> {
  const dir = mkdtempSync(join(tmpdir(), 'kubebyon-instances-'));
  const password = `pw-${Math.random().toString(36).slice(2)}`;
  const secret = `inst-${Math.random().toString(36).slice(2)}-secret`;
  const beds: Bed[] = [];
  const result: Partial<InstancesResult> = {
    provider,
    instances: count,
    n,
    date: new Date().toISOString(),
    versions,
    load1: [round1(loadavg()[0]), 0],
  };
  let svc: Awaited<ReturnType<typeof startService>> | undefined;
  try {
    for (let i = 0; i < count; i++) beds.push(await startBed(password));
    const env = serviceEnv(beds, dir, password);
    if (env.KUBEBYON_DATAPLANE_SLOTS) result.slots = env.KUBEBYON_DATAPLANE_SLOTS;
    svc = await startService(env, secret);
    const service = svc;
    // A retry carries its own query: the same signed request twice within a second is a replay.
    const call = async (method: string, path: string, b?: unknown) => {
      for (let attempt = 1; ; attempt++) {
        const sep = path.includes('?') ? '&' : '?';
        const res = await service.call(method, attempt === 1 ? path : `${path}${sep}try=${attempt}`, b);
        if (res.status >= 200 && res.status < 300) return;
        if (res.status !== 503 || attempt >= 20)
          throw new Error(`${method} ${path}: ${res.status} ${res.body.slice(0, 300)}`);
        await sleep(50 * attempt);
      }
    };
    const expected = (host: string, port: number) => `${ADDRESS}:${port} ${host}`;

    // N clusters in one request, then every 25th proven on every instance.
    const loaded = Array.from({ length: n }, (_, i) => ({
      name: `c${pad(i)}`,
      host: `c${pad(i)}.${DOMAIN}`,
      port: ports[i % ports.length] as number,
    }));
    const t0 = performance.now();
    await call('PUT', '/v1/clusters?wait=true', {
      clusters: loaded.map((c) => ({ name: c.name, ...body(c.host, c.port) })),
    });
    const putAllMs = Math.round(performance.now() - t0);
    const sample = loaded.filter((_, i) => i % 25 === 0);
    let missing = 0;
    for (const c of sample) {
      const answers = await Promise.all(
        beds.map((b) => routable(b.sniPort, c.host, expected(c.host, c.port), t0, Date.now() + 30_000)),
      );
      missing += answers.filter((a) => a === null).length;
    }
    result.load = { putAllMs, sampled: sample.length * count, missing };
    log(`load ${JSON.stringify(result.load)}`);

    // Single changes, one at a time: a new cluster, a move of loaded cluster k, a delete of loaded n-1-k.
    const byKind = {
      add: { samples: [] as Array<number | null>, spreads: [] as number[], reloads: 0 },
      move: { samples: [] as Array<number | null>, spreads: [] as number[], reloads: 0 },
      remove: { samples: [] as Array<number | null>, spreads: [] as number[], reloads: 0 },
    };
    const loadsAll = () => Promise.all(beds.map((b) => b.loads()));
    const first = await loadsAll();
    for (let i = 0; i < changes; i++) {
      const kind = (['add', 'move', 'remove'] as const)[i % 3] as keyof typeof byKind;
      const k = Math.floor(i / 3);
      const before = await loadsAll();
      const deadline = Date.now() + CHANGE_DEADLINE_MS;
      const t = performance.now();
      let sent: Promise<void>;
      let watch: (b: Bed) => Promise<number | null>;
      if (kind === 'add') {
        const host = `a${pad(k)}.${DOMAIN}`;
        const port = ports[k % ports.length] as number;
        sent = call('PUT', `/v1/clusters/a${pad(k)}?wait=true`, body(host, port));
        watch = (b) => routable(b.sniPort, host, expected(host, port), t, deadline);
      } else if (kind === 'move') {
        const c = loaded[k] as (typeof loaded)[number];
        const port = ports[(ports.indexOf(c.port) + 1) % ports.length] as number;
        sent = call('PUT', `/v1/clusters/${c.name}?wait=true`, body(c.host, port));
        watch = (b) => routable(b.sniPort, c.host, expected(c.host, port), t, deadline);
      } else {
        const c = loaded[n - 1 - k] as (typeof loaded)[number];
        sent = call('DELETE', `/v1/clusters/${c.name}?wait=true`);
        watch = (b) => untilClosed(b.sniPort, c.host, t, deadline);
      }
      // Probed once the call is answered: a probe racing the apply would hold a session on the very server
      // a move replaces, which the Data Plane API provider then moves in place (through the configuration).
      await sent;
      const times = await Promise.all(beds.map(watch));
      const done = times.filter((x): x is number => x !== null);
      // Which change, on which instance, was slow or never seen: a one-off or one instance lagging.
      if (done.length < times.length || Math.max(...done) > 200)
        log(
          `slow ${kind} #${i}: ${times.map((x, j) => `h${j} ${x === null ? 'never' : Math.round(x)}`).join(', ')}`,
        );
      const slot = byKind[kind];
      slot.samples.push(done.length === times.length ? Math.max(...done) : null);
      if (done.length === times.length) slot.spreads.push(Math.max(...done) - Math.min(...done));
      const after = await loadsAll();
      slot.reloads += after.reduce((sum, x, j) => sum + x - (before[j] ?? 0), 0);
    }
    // A reload a change triggers after it was already routable still counts.
    await sleep(1_000);
    const last = await loadsAll();
    result.reloads = last.map((x, j) => x - (first[j] ?? 0));
    result.add = kindResult(byKind.add.samples, byKind.add.spreads, byKind.add.reloads);
    result.move = kindResult(byKind.move.samples, byKind.move.spreads, byKind.move.reloads);
    result.remove = kindResult(byKind.remove.samples, byKind.remove.spreads, byKind.remove.reloads);
    log(`add ${JSON.stringify(result.add)}`);
    log(`move ${JSON.stringify(result.move)}`);
    log(`delete ${JSON.stringify(result.remove)} reloads ${JSON.stringify(result.reloads)}`);
    // Experiments: `BENCH_DUMP=<file>` keeps the service's log (`<file>.<instances>`).
    if (process.env.BENCH_DUMP) writeFileSync(`${process.env.BENCH_DUMP}.${count}`, svc.output());
    result.resources = svc.resources();
    result.load1 = [result.load1?.[0] ?? 0, round1(loadavg()[0])];
    result.versions = { ...versions, haproxy: (await beds[0]?.version()) ?? version };
  } catch (err) {
    result.error = err instanceof Error ? err.message : String(err);
    log(`error: ${result.error}`);
  } finally {
    await svc?.stop().catch(() => {});
    await Promise.all(beds.map((b) => b.stop().catch(() => {})));
    rmSync(dir, { recursive: true, force: true });
  }
  return result as InstancesResult;
}

const fmt = (x: number | null | undefined) => (x === null || x === undefined ? '–' : String(x));
const cell = (k: KindResult | undefined) =>
  k ? `${fmt(k.p50)} / ${fmt(k.p99)} / ${fmt(k.max)}${k.missing ? ` (${k.missing} missing)` : ''}` : '–';
const spread = (k: KindResult | undefined) => (k ? `${fmt(k.spreadP50)} / ${fmt(k.spreadMax)}` : '–');

function markdown(results: InstancesResult[], about: string): string {
  const rows = results.map((r) =>
    [
      r.slots ? `${r.provider} (slots: ${r.slots})` : r.provider,
      r.instances,
      r.n,
      r.load ? `${r.load.putAllMs} (${r.load.missing}/${r.load.sampled} missing)` : '–',
      cell(r.add),
      cell(r.move),
      cell(r.remove),
      `${spread(r.add)} · ${spread(r.move)} · ${spread(r.remove)}`,
      r.reloads ? r.reloads.join(' / ') : '–',
      r.resources ? `${Math.round(r.resources.rssMb)} / ${Math.round(r.resources.peakRssMb)}` : '–',
      `${r.date?.slice(0, 16).replace('T', ' ')}, ${Object.entries(r.versions ?? {})
        .map(([k, v]) => `${k} ${v}`)
        .join(', ')}, load ${r.load1?.join(' → ')}`,
      r.error ?? '',
    ].join(' | '),
  );
  return [
    '# bench/instances.ts: one change to routable on every HAProxy instance',
    '',
    about,
    '',
    'Map routing, static topology. Latencies in ms, p50 / p99 / max, from the signed webhook (`?wait=true`)',
    'being sent to the TLS handshake by SNI that proves the change on every instance (a delete: refused on',
    'every instance), all instances polled at once once it is answered (a probe racing the apply would hold a',
    'session on the server a move replaces). Spread: the slowest instance less the fastest, p50 / max,',
    'for new · move · delete. Reloads: HAProxy’s own count (master `show proc`) per instance during the changes.',
    'Host load: the 1-minute load average before → after the run (other work on the host makes numbers noisy).',
    '',
    '| provider | instances | N | N in one request (ms) | new cluster | endpoint move | delete → closed | spread new · move · delete | reloads per instance | RSS / peak MB | run (UTC), versions, host load | error |',
    '| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |',
    ...rows.map((r) => `| ${r} |`),
    '',
  ].join('\n');
}

const log = (line: string) => console.log(`[${new Date().toISOString().slice(11, 19)}] ${line}`);
const jsonPath = join(outDir, 'instances.json');
const previous: InstancesResult[] = (() => {
  try {
    return JSON.parse(readFileSync(jsonPath, 'utf8')).results ?? [];
  } catch {
    return [];
  }
})();
const key = (r: InstancesResult) => `${r.provider}|${r.instances}|${r.n}`;
const results = new Map(previous.map((r) => [key(r), r]));
const pkg = JSON.parse(readFileSync(join(REPO, 'package.json'), 'utf8')) as { version: string };
const versions = {
  adapter: pkg.version,
  node: process.version,
  haproxy: version,
  ...(provider === 'dataplaneapi' && source
    ? { dataplaneapi: source.kind === 'bin' ? basename(source.path) : source.image }
    : {}),
};
const machine = `nproc ${cpus().length} (${cpus()[0]?.model.trim()}), ${Math.round(totalmem() / 2 ** 30)} GiB`;

mkdirSync(outDir, { recursive: true });
const servers = await startIdentityServers([ADDRESS], 40);
try {
  for (const count of counts) {
    log(`${provider} instances=${count} N=${n} changes=${changes}`);
    try {
      const r = await runOne(count, servers.ports);
      results.set(key(r), r);
      const all = [...results.values()].sort((a, b) => key(a).localeCompare(key(b)));
      const date = new Date().toISOString();
      writeFileSync(jsonPath, `${JSON.stringify({ date, machine, results: all }, null, 1)}\n`);
      writeFileSync(join(outDir, 'instances.md'), markdown(all, `written ${date}; machine: ${machine}`));
      console.log(markdown([r], '').split('\n').slice(9).join('\n'));
    } finally {
      await sweepTestbedContainers();
    }
  }
} finally {
  await servers.close();
}
