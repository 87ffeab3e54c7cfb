import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { connect, type TLSSocket } from 'node:tls';
import type { Cluster } from '../compare/approaches.js';
import {
  type IdentityServers,
  type ProbeSource,
  probeUntil,
  sources,
  systemSource,
  until,
  untilAll,
} from '../compare/identity.js';
import type { BenchKube } from '../compare/kube.js';
import { benchServiceEnv, type Resources, startService } from '../compare/service.js';
import type { Target } from '../compare/targets.js';

/** One provider at one N: what issue 21's targets ask, measured end to end. */
export interface ZeroReloadResult {
  provider: string;
  /** The Data Plane API's `KUBEBYON_DATAPLANE_SLOTS`. */
  slots?: string;
  /** Always `map` now; `rules` in results measured while KUBEBYON_HAPROXY_ROUTING was a setting. */
  routing: 'map' | 'rules';
  n: number;
  cold: { putAllMs: number; routableMs: number | null; reloads: number; restartReadyMs: number };
  add: Latencies;
  move: Latencies;
  remove: Latencies;
  burst: { count: number; routableMs: number | null; missing: number; reloads: number };
  stream: { changes: number; survived: boolean; workersAfter: number; reloads: number };
  resources: Resources & { heapUsedMb: number | undefined };
  error?: string;
}

export interface Latencies {
  count: number;
  p50: number | null;
  p99: number | null;
  max: number | null;
  missing: number;
  reloads: number;
}

export interface RunOptions {
  n: number;
  /** Sequential adds, moves and deletes timed one by one. */
  changes: number;
  burst: number;
  /** Adds and deletes of other clusters while one stream is held open. */
  streamChanges: number;
  servers: IdentityServers;
  address: string;
  log: (line: string) => void;
}

const DOMAIN = 'zr.example.com';
const pad = (i: number) => String(i).padStart(5, '0');
const cluster = (prefix: string, i: number, ports: number[]): Cluster => ({
  name: `${prefix}${pad(i)}`,
  host: `${prefix}${pad(i)}.${DOMAIN}`,
  nodePort: ports[i % ports.length] as number,
});
const body = (c: Cluster) => ({
  control_plane_host: c.host,
  public_access_mode: 'loadbalancer',
  node_port: c.nodePort,
});

function percentile(values: number[], p: number): number | null {
  if (values.length === 0) return null;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)] ?? null;
}

export function latencies(samples: Array<number | null>, reloads: number): Latencies {
  const done = samples.filter((x): x is number => x !== null).map((x) => Math.round(x * 10) / 10);
  return {
    count: samples.length,
    p50: percentile(done, 50),
    p99: percentile(done, 99),
    max: done.length ? Math.max(...done) : null,
    missing: samples.length - done.length,
    reloads,
  };
}

/** Probes until a handshake with `host` is refused or closed without an answer; ms since `since`, or null. */
export function untilClosed(
  port: number,
  host: string,
  since: number,
  deadline: number,
  from: ProbeSource = systemSource,
): Promise<number | null> {
  return probeUntil(port, host, (answer) => answer === null, since, deadline, { from, pauseMs: () => 2 });
}

/** A TLS connection held through HAProxy like a watch; `alive()` is false once either side closed it. */
function hold(port: number, host: string): Promise<{ alive(): boolean; close(): void }> {
  return new Promise((resolve, reject) => {
    let closed = false;
    const socket: TLSSocket = connect({
      host: '127.0.0.1',
      port,
      servername: host,
      rejectUnauthorized: false,
    });
    socket.on('error', () => {});
    socket.on('close', () => {
      closed = true;
    });
    const timer = setTimeout(() => reject(new Error(`no answer from ${host}`)), 5_000);
    socket.once('data', () => {
      clearTimeout(timer);
      resolve({ alive: () => !closed && !socket.destroyed, close: () => socket.destroy() });
    });
  });
}

/** The service's `NODE_OPTIONS` as the adapter's image sets them (`docker/adapter/Dockerfile`). */
export function imageNodeOptions(): string {
  const dockerfile = readFileSync(new URL('../../docker/adapter/Dockerfile', import.meta.url), 'utf8');
  const options = /NODE_OPTIONS="([^"]*)"/.exec(dockerfile)?.[1];
  if (options === undefined) throw new Error('docker/adapter/Dockerfile sets no NODE_OPTIONS="…"');
  return options;
}

/** Experiments: `BENCH_SERVICE_ENV='KUBEBYON_PERSIST_DELAY_MS=60000,…'` overrides the service's settings. */
export function serviceEnvOverrides(): Record<string, string> {
  return Object.fromEntries(
    (process.env.BENCH_SERVICE_ENV ?? '')
      .split(',')
      .filter((kv) => kv.includes('='))
      .map((kv) => [kv.slice(0, kv.indexOf('=')), kv.slice(kv.indexOf('=') + 1)]),
  );
}

/**
 * The service's environment in a measuring bench: `benchServiceEnv`, the Data Plane API as the deployment
 * guide sets it up (slot backends in its general storage; `BENCH_DATAPLANE_SLOTS=config` measures them in
 * the configuration file), `NODE_OPTIONS` as the image runs it unless `BENCH_NODE_OPTIONS` says otherwise
 * (e.g. `--require` of a profiler), then `BENCH_SERVICE_ENV`'s overrides.
 */
export function benchRunEnv(target: Target, kubeconfig: string, dir: string): Record<string, string> {
  return {
    ...benchServiceEnv(target, kubeconfig, dir),
    ...(target.provider === 'dataplaneapi'
      ? { KUBEBYON_DATAPLANE_SLOTS: process.env.BENCH_DATAPLANE_SLOTS ?? 'storage' }
      : {}),
    NODE_OPTIONS: process.env.BENCH_NODE_OPTIONS ?? imageNodeOptions(),
    ...serviceEnvOverrides(),
  };
}

export async function runZeroReload(
  target: Target,
  kube: BenchKube,
  o: RunOptions,
): Promise<ZeroReloadResult> {
  const dir = mkdtempSync(join(tmpdir(), 'kubebyon-zr-'));
  const secret = `zr-${Math.random().toString(36).slice(2)}-secret`;
  const env = benchRunEnv(target, kube.kubeconfig, dir);
  let svc = await startService(env, secret);
  const port = target.sniPort;
  // Probes from 200 loopback sources in turn: HAProxy's per-source rate limit is for clients, not the bench.
  const from = sources(200);
  const ports = o.servers.ports;
  const expected = (c: Cluster) => `${o.address}:${c.nodePort} ${c.host}`;
  const call = async (method: string, path: string, b?: unknown) => {
    for (let attempt = 1; ; attempt++) {
      const res = await svc.call(method, path, b);
      if (res.status >= 200 && res.status < 300) return;
      if (res.status !== 503 || attempt >= 20)
        throw new Error(`${method} ${path}: ${res.status} ${res.body.slice(0, 300)}`);
      await sleep(50 * attempt);
    }
  };
  const result: Partial<ZeroReloadResult> = {
    provider: target.provider,
    ...('KUBEBYON_DATAPLANE_SLOTS' in env ? { slots: env.KUBEBYON_DATAPLANE_SLOTS } : {}),
    routing: 'map',
    n: o.n,
  };
  try {
    // Cold: N clusters in one request to routable, then a restart of the service to ready.
    const existing = Array.from({ length: o.n }, (_, i) => cluster('c', i, ports));
    let loads = await target.loads();
    const t0 = performance.now();
    const sample = existing.filter((_, i) => i % Math.max(1, Math.floor(o.n / 40)) === 0);
    const routable = untilAll(
      port,
      sample.map((c) => ({ host: c.host, expected: expected(c) })),
      t0,
      Date.now() + 900_000,
      4,
      from,
    );
    await call('PUT', '/v1/clusters?wait=true', {
      clusters: existing.map((c) => ({ name: c.name, ...body(c) })),
    });
    const putAllMs = performance.now() - t0;
    const r = await routable;
    const coldReloads = (await target.loads()) - loads;
    await svc.stop();
    const t1 = performance.now();
    svc = await startService(env, secret);
    await call('POST', '/v1/reconcile?wait=true');
    result.cold = {
      putAllMs: Math.round(putAllMs),
      routableMs: r.ms && Math.round(r.ms),
      reloads: coldReloads,
      restartReadyMs: Math.round(performance.now() - t1),
    };
    o.log(`cold ${JSON.stringify(result.cold)}`);

    // One at a time: add, then move the same cluster to another NodePort, then delete it.
    const added = Array.from({ length: o.changes }, (_, i) => cluster('a', i, ports));
    const timed = async (what: (c: Cluster) => Promise<number | null>, list: Cluster[]) => {
      const before = await target.loads();
      const samples: Array<number | null> = [];
      for (const c of list) samples.push(await what(c));
      // Which changes were slow (index: ms), to tell a one-off (a first pass, a persistence) from a trend.
      const slow = samples.flatMap((x, i) => (x !== null && x > 50 ? [`${i}:${Math.round(x)}`] : []));
      if (slow.length > 0) o.log(`slow changes ${slow.join(' ')}`);
      return latencies(samples, (await target.loads()) - before);
    };
    result.add = await timed(async (c) => {
      const t = performance.now();
      await call('PUT', `/v1/clusters/${c.name}?wait=true`, body(c));
      return until(port, c.host, expected(c), t, Date.now() + 30_000, from);
    }, added);
    const moved = added.map((c, i) => ({ ...c, nodePort: ports[(i + 1) % ports.length] as number }));
    result.move = await timed(async (c) => {
      const t = performance.now();
      await call('PUT', `/v1/clusters/${c.name}?wait=true`, body(c));
      return until(port, c.host, expected(c), t, Date.now() + 30_000, from);
    }, moved);
    result.remove = await timed(async (c) => {
      const t = performance.now();
      await call('DELETE', `/v1/clusters/${c.name}?wait=true`);
      return untilClosed(port, c.host, t, Date.now() + 30_000, from);
    }, moved);
    // Experiments: `BENCH_DUMP=<file>` keeps the service's log of the one-at-a-time changes (with
    // `BENCH_SERVICE_ENV=KUBEBYON_LOG_LEVEL=debug`, each pass and request with its time).
    if (process.env.BENCH_DUMP) writeFileSync(process.env.BENCH_DUMP, svc.output());
    o.log(
      `add ${JSON.stringify(result.add)} move ${JSON.stringify(result.move)} delete ${JSON.stringify(result.remove)}`,
    );

    // A held stream through adds and deletes of other clusters (like a `kubectl get -w`).
    const first = existing[0] ?? cluster('s', 0, ports);
    if (existing.length === 0) await call('PUT', `/v1/clusters/${first.name}?wait=true`, body(first));
    const stream = await hold(port, first.host);
    loads = await target.loads();
    const churn = Array.from({ length: Math.floor(o.streamChanges / 2) }, (_, i) => cluster('w', i, ports));
    // Added and deleted in turn, like clusters coming and going: the pool has room throughout.
    for (const c of churn) {
      await call('PUT', `/v1/clusters/${c.name}?wait=true`, body(c));
      await call('DELETE', `/v1/clusters/${c.name}?wait=true`);
    }
    await sleep(500);
    result.stream = {
      changes: churn.length * 2,
      survived: stream.alive(),
      workersAfter: await target.workers(),
      reloads: (await target.loads()) - loads,
    };
    stream.close();
    o.log(`stream ${JSON.stringify(result.stream)}`);

    // A burst of new clusters within one second, on top of N.
    const burst = Array.from({ length: o.burst }, (_, i) => cluster('b', i, ports));
    loads = await target.loads();
    const tb = performance.now();
    const all = untilAll(
      port,
      burst.filter((_, i) => i % 10 === 0).map((c) => ({ host: c.host, expected: expected(c) })),
      tb,
      Date.now() + 60_000,
      8,
      from,
    );
    const sent: Array<Promise<void>> = [];
    for (let k = 0; k < burst.length; k++) {
      const wait = tb + (k * 1_000) / burst.length - performance.now();
      if (wait > 0) await sleep(wait);
      sent.push(call('PUT', `/v1/clusters/${(burst[k] as Cluster).name}`, body(burst[k] as Cluster)));
    }
    await Promise.all(sent);
    const b = await all;
    await call('POST', '/v1/reconcile?wait=true');
    result.burst = {
      count: o.burst,
      routableMs: b.ms && Math.round(b.ms),
      missing: b.missing,
      reloads: (await target.loads()) - loads,
    };
    o.log(`burst ${JSON.stringify(result.burst)}`);
    if (process.env.BENCH_DUMP) writeFileSync(`${process.env.BENCH_DUMP}.burst`, svc.output());

    const heap = (await svc.metrics()).get('nodejs_heap_size_used_bytes');
    result.resources = {
      ...svc.resources(),
      heapUsedMb: heap === undefined ? undefined : Math.round(heap / 1e5) / 10,
    };
  } catch (err) {
    result.error = err instanceof Error ? err.message : String(err);
    o.log(`error: ${result.error}`);
  } finally {
    await svc.stop().catch(() => {});
    rmSync(dir, { recursive: true, force: true });
  }
  return result as ZeroReloadResult;
}
