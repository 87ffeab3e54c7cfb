import { execFile } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { getPriority, setPriority, tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import { parseShowProc } from '../../src/providers/haproxy/runtime-text.js';
import { statRow } from '../attack/stats.js';
import { type IdentityServers, sources, until, untilAll } from '../compare/identity.js';
import type { BenchKube } from '../compare/kube.js';
import { type BenchService, startService } from '../compare/service.js';
import type { Target } from '../compare/targets.js';
import { tsWorker } from '../compare/thread.js';
import { benchRunEnv, type Latencies, latencies, untilClosed } from '../zero-reload/run.js';
import type { ProofAnswer, ProofRequest } from './prober.js';

const run = promisify(execFile);

/** Memory with N clusters routed: HAProxy's current worker and the service. */
export interface Memory {
  workerRssMb: number | null;
  serviceRssMb: number;
  servicePeakRssMb: number;
  /** V8 heap in use, the median of five readings a half second apart (no GC is forced). */
  heapUsedMb: number | null;
}

/** One provider at N: authorized networks' targets (issue 34), measured end to end. */
export interface NetworksResult {
  provider: string;
  slots?: string;
  n: number;
  entries: number;
  open: { putAllMs: number; routableMs: number | null; reloads: number; memory: Memory };
  lists: { putAllMs: number; enforcedMs: number | null; reloads: number; memory: Memory };
  changes: {
    count: number;
    /** The signed `PUT ?wait=true` answered: HAProxy enforces the list, and the files hold it. */
    answered: Latencies;
    /**
     * From the bench deciding to send a change to its request going to the socket: the bench's own time
     * (the body signed, a connection opened, its thread scheduled at nice 10), not counted in the others.
     */
    sending: Latencies;
    /** The source the new list adds: its first connection to reach the API server, when the server saw it. */
    allowed: Latencies;
    /** The same connection, when the client had finished its handshake (the proof's own cost included). */
    allowedHandshake: Latencies;
    /** The source the new list drops: its first ClientHello refused. */
    refused: Latencies;
    /** Alternating: even changes proven by the allowed source, odd ones by the refused one. */
    firstProof: Latencies;
    /** Both proven. */
    both: Latencies;
    reloads: number;
    /** Changes whose dropped source, refused at its hello, then got through a whole handshake (must be 0). */
    refusalsContradicted: number;
    /**
     * Connections the :443 guard refused during the changes (the frontend's `dcon`): the probes' own sources
     * must never meet the per-source limits, or a refusal would prove nothing. Null if unread.
     */
    guardRefused: number | null;
    /** The service's major collections during the changes (prom-client's `nodejs_gc_duration_seconds`). */
    majorGc: { count: number; ms: number } | null;
  };
  error?: string;
}

export interface NetworksOptions {
  n: number;
  /** Entries per cluster's list (the issue asks 16). */
  entries: number;
  changes: number;
  /** How many clusters the changes go round (each with its own two loopback sources). */
  probed: number;
  servers: IdentityServers;
  address: string;
  log: (line: string) => void;
}

const DOMAIN = 'an.example.com';
const name = (i: number) => `n${String(i).padStart(5, '0')}`;
/** Entry `j` of cluster `i`: a /32 of 198.18.0.0/15 no other cluster holds (only a map key to HAProxy). */
const filler = (i: number, j: number, entries: number) => {
  const k = i * entries + j;
  return `198.${18 + (k >> 16)}.${(k >> 8) & 255}.${k & 255}/32`;
};
/** The two loopback sources of probed cluster `k`: a change lets one in and shuts the other out. */
const sourcesOf = (k: number): [string, string] => [`127.0.0.${10 + 2 * k}`, `127.0.0.${11 + 2 * k}`];

/** The proofs' thread (`prober.ts`), one change at a time. */
function startProver() {
  const worker = tsWorker(new URL('./prober.ts', import.meta.url));
  return {
    prove: (request: ProofRequest) =>
      new Promise<ProofAnswer>((resolve, reject) => {
        const exited = (code: number) => reject(new Error(`the proofs' thread exited (${code})`));
        worker.once('error', reject);
        worker.once('exit', exited);
        worker.once('message', (answer: ProofAnswer) => {
          worker.off('error', reject);
          worker.off('exit', exited);
          resolve(answer);
        });
        worker.postMessage(request);
      }),
    close: () => worker.terminate(),
  };
}

/**
 * Lowers every thread of the bench (the proofs', the stand-in servers', its own) to nice 10 during the
 * changes: they stand for machines elsewhere (kubebyon-api, the clients, the API servers), so when the two
 * cores of a small machine are both wanted, what is measured (the service, HAProxy) runs first, and the bench
 * takes what is left. Each thread is its own schedulable task (`/proc/self/task`). Holding the bench to one
 * CPU instead (`taskset`, before 2026-12-06) queued its three threads on that core at about 90 % busy, and
 * the proofs' own handshakes waited there (stock p99 21.3-24.3 ms in paired runs, 18.2-21.0 niced).
 * `BENCH_NICE=0` leaves it as it is. Resolves with the undoing (best effort: only root may raise a priority).
 */
function niceBench(): () => void {
  const nice = Number(process.env.BENCH_NICE ?? '10');
  if (!Number.isInteger(nice) || nice <= 0) return () => {};
  const before = new Map<number, number>();
  for (const t of readdirSync(`/proc/${process.pid}/task`).map(Number)) {
    try {
      before.set(t, getPriority(t));
      setPriority(t, Math.min(19, nice));
    } catch {
      // A thread that ended meanwhile.
    }
  }
  return () => {
    for (const [t, p] of before) {
      try {
        setPriority(t, p);
      } catch {
        // Not root, or the thread ended: it stays niced.
      }
    }
    before.clear();
  };
}

/** The SNI frontend's `dcon` in HAProxy's current worker: connections `tcp-request connection` refused. */
async function guardRefusals(target: Target): Promise<number | null> {
  const text = await target.masterCli('@1 show stat').catch(() => '');
  const row = statRow(text, 'kubebyon_sni');
  return row?.dcon ? Number(row.dcon) : null;
}

/** The service's major collections so far, and their pauses in total (ms). */
async function majorGc(svc: BenchService): Promise<{ count: number; ms: number } | null> {
  const m = await svc.metrics().catch(() => undefined);
  const count = m?.get('nodejs_gc_duration_seconds_count{kind="major"}');
  const seconds = m?.get('nodejs_gc_duration_seconds_sum{kind="major"}');
  return count === undefined || seconds === undefined ? null : { count, ms: seconds * 1000 };
}

/** HAProxy's current worker's RSS, read inside its container (the first worker `show proc` lists). */
async function workerRssMb(target: Target): Promise<number | null> {
  const container = target.stock?.containerId ?? target.dataplane?.containerId;
  const pid = parseShowProc(await target.masterCli('show proc')).workers[0];
  if (!container || pid === undefined) return null;
  for (const cat of [['/bin/busybox', 'cat'], ['cat']])
    try {
      const { stdout } = await run('docker', ['exec', container, ...cat, `/proc/${pid}/status`]);
      const kb = /VmRSS:\s+(\d+) kB/.exec(stdout)?.[1];
      if (kb) return Math.round(Number(kb) / 102.4) / 10;
    } catch {}
  return null;
}

async function memory(target: Target, svc: BenchService): Promise<Memory> {
  await sleep(2_000);
  const heaps: number[] = [];
  for (let i = 0; i < 5; i++) {
    const h = (await svc.metrics()).get('nodejs_heap_size_used_bytes');
    if (h !== undefined) heaps.push(h);
    await sleep(500);
  }
  heaps.sort((a, b) => a - b);
  const heap = heaps[Math.floor(heaps.length / 2)];
  const r = svc.resources();
  return {
    workerRssMb: await workerRssMb(target),
    serviceRssMb: Math.round(r.rssMb),
    servicePeakRssMb: Math.round(r.peakRssMb),
    heapUsedMb: heap === undefined ? null : Math.round(heap / 1e5) / 10,
  };
}

export async function runNetworks(
  target: Target,
  kube: BenchKube,
  o: NetworksOptions,
): Promise<NetworksResult> {
  const dir = mkdtempSync(join(tmpdir(), 'kubebyon-nets-'));
  const secret = `nets-${Math.random().toString(36).slice(2)}-secret`;
  const env = benchRunEnv(target, kube.kubeconfig, dir);
  const svc = await startService(env, secret);
  const prover = startProver();
  // Undone in `finally` too: a service spawned while the bench is niced would be niced with it.
  let unnice = () => {};
  const port = target.sniPort;
  const ports = o.servers.ports;
  const from = sources(200);
  const nodePort = (i: number) => ports[i % ports.length] as number;
  const host = (i: number) => `${name(i)}.${DOMAIN}`;
  const expected = (i: number) => `${o.address}:${nodePort(i)} ${host(i)}`;
  const body = (i: number, networks?: string[]) => ({
    control_plane_host: host(i),
    public_access_mode: 'loadbalancer',
    node_port: nodePort(i),
    ...(networks ? { authorized_networks: networks } : {}),
  });
  /** Cluster `i`'s list: its fillers, and for a probed cluster in state `s` one of its loopback sources. */
  const list = (i: number, s: 0 | 1) => {
    const fill = Array.from({ length: o.entries - (i < o.probed ? 1 : 0) }, (_, j) =>
      filler(i, j, o.entries),
    );
    return i < o.probed ? [...fill, `${sourcesOf(i)[s]}/32`] : fill;
  };
  const call = async (method: string, path: string, b?: unknown, sent?: (at: bigint) => void) => {
    const res = await svc.call(method, path, b, sent);
    if (res.status < 200 || res.status >= 300)
      throw new Error(`${method} ${path}: ${res.status} ${res.body.slice(0, 300)}`);
  };
  const all = Array.from({ length: o.n }, (_, i) => i);
  const sample = all.filter((i) => i % Math.max(1, Math.floor(o.n / 40)) === 0);
  const result: Partial<NetworksResult> = {
    provider: target.provider,
    ...('KUBEBYON_DATAPLANE_SLOTS' in env ? { slots: env.KUBEBYON_DATAPLANE_SLOTS } : {}),
    n: o.n,
    entries: o.entries,
  };
  try {
    // N clusters open to all, in one request, to routable; memory.
    let loads = await target.loads();
    let t = performance.now();
    const routable = untilAll(
      port,
      sample.map((i) => ({ host: host(i), expected: expected(i) })),
      t,
      Date.now() + 600_000,
      4,
      from,
    );
    await call('PUT', '/v1/clusters?wait=true', {
      clusters: all.map((i) => ({ name: name(i), ...body(i) })),
    });
    const openPut = performance.now() - t;
    const r = await routable;
    result.open = {
      putAllMs: Math.round(openPut),
      routableMs: r.ms && Math.round(r.ms),
      reloads: (await target.loads()) - loads,
      memory: await memory(target, svc),
    };
    o.log(`open ${JSON.stringify(result.open)}`);

    // Every cluster gets a list of `entries` networks, in one request: enforced when each probed cluster
    // lets its first source in and shuts its second out, and sampled others shut out the bench's sources.
    loads = await target.loads();
    t = performance.now();
    await call('PUT', '/v1/clusters?wait=true', {
      clusters: all.map((i) => ({ name: name(i), ...body(i, list(i, 0)) })),
    });
    const listsPut = performance.now() - t;
    const deadline = Date.now() + 1_200_000;
    const proofs = await Promise.all([
      ...all
        .slice(0, o.probed)
        .flatMap((k) => [
          until(port, host(k), expected(k), t, deadline, () => sourcesOf(k)[0]),
          untilClosed(port, host(k), t, deadline, () => sourcesOf(k)[1]),
        ]),
      ...sample.filter((i) => i >= o.probed).map((i) => untilClosed(port, host(i), t, deadline, from)),
    ]);
    result.lists = {
      putAllMs: Math.round(listsPut),
      enforcedMs: proofs.includes(null) ? null : Math.round(Math.max(...(proofs as number[]))),
      reloads: (await target.loads()) - loads,
      memory: await memory(target, svc),
    };
    o.log(`lists ${JSON.stringify(result.lists)}`);

    // One list change at a time, round the probed clusters: the loopback source swaps (and one filler).
    const state = new Array<0 | 1>(o.probed).fill(0);
    const answered: number[] = [];
    const sending: number[] = [];
    const allowed: Array<number | null> = [];
    const allowedHandshake: Array<number | null> = [];
    let contradicted = 0;
    const refused: Array<number | null> = [];
    const first: Array<number | null> = [];
    const both: Array<number | null> = [];
    loads = await target.loads();
    const dconBefore = await guardRefusals(target);
    unnice = niceBench();
    const gcBefore = await majorGc(svc);
    for (let c = 0; c < o.changes; c++) {
      const k = c % o.probed;
      const to: 0 | 1 = state[k] === 0 ? 1 : 0;
      const networks = list(k, to);
      // The filler too: a change is two keys added and two deleted.
      networks[0] = to === 1 ? `198.19.255.${k}/32` : filler(k, 0, o.entries);
      const [s0, s1] = sourcesOf(k);
      const [inside, outside] = to === 1 ? [s1, s0] : [s0, s1];
      const start = process.hrtime.bigint();
      let sentAt: bigint | undefined;
      // The proofs run from before the request is sent, not from its answer: HAProxy enforces a list at
      // runtime, and the service acknowledges it only once the allow map is on disk as well (`answered`).
      // They run in their own thread (`prober.ts`), as the stand-in servers do: this thread's collections
      // would stop them. Every time is then counted from the request going to the socket (`sending` is the
      // bench's own part before it). A distinct query per change: the same signed request twice within a
      // second is a replay (401), and every 2 × probed changes send the same list again.
      const proofs = prover.prove({
        port,
        host: host(k),
        expected: expected(k),
        inside,
        outside,
        start,
        deadline: Date.now() + 30_000,
      });
      const [answeredAt, proven] = await Promise.all([
        call('PUT', `/v1/clusters/${name(k)}?wait=true&change=${c}`, body(k, networks), (at) => {
          sentAt = at;
        }).then(() => process.hrtime.bigint()),
        proofs,
      ]);
      if (sentAt === undefined) throw new Error(`change ${c}: the request was answered but never written`);
      const before = Number(sentAt - start) / 1e6;
      // `latencies` rounds each sample.
      const fromSent = (ms: number | null) => (ms === null ? null : ms - before);
      const a = fromSent(proven.allowed);
      const h = fromSent(proven.allowedHandshake);
      const x = fromSent(proven.refused);
      if (x !== null && !proven.refusalConfirmed) contradicted++;
      sending.push(before);
      answered.push(Number(answeredAt - sentAt) / 1e6);
      state[k] = to;
      allowed.push(a);
      allowedHandshake.push(h);
      refused.push(x);
      first.push(c % 2 === 0 ? a : x);
      both.push(a === null || x === null ? null : Math.max(a, x));
    }
    unnice();
    const reloads = (await target.loads()) - loads;
    const dconAfter = await guardRefusals(target);
    const gcAfter = await majorGc(svc);
    // Experiments: `BENCH_DUMP=<file>` keeps the service's output of the changes.
    if (process.env.BENCH_DUMP) writeFileSync(process.env.BENCH_DUMP, svc.output());
    const slow = both.flatMap((v, i) => (v !== null && v > 40 ? [`${i}:${Math.round(v)}`] : []));
    if (slow.length) o.log(`slow changes ${slow.join(' ')}`);
    result.changes = {
      count: o.changes,
      answered: latencies(answered, reloads),
      sending: latencies(sending, reloads),
      allowed: latencies(allowed, reloads),
      allowedHandshake: latencies(allowedHandshake, reloads),
      refused: latencies(refused, reloads),
      firstProof: latencies(first, reloads),
      both: latencies(both, reloads),
      reloads,
      refusalsContradicted: contradicted,
      guardRefused: dconBefore === null || dconAfter === null ? null : dconAfter - dconBefore,
      majorGc:
        gcBefore && gcAfter
          ? {
              count: gcAfter.count - gcBefore.count,
              ms: Math.round((gcAfter.ms - gcBefore.ms) * 10) / 10,
            }
          : null,
    };
    o.log(`changes ${JSON.stringify(result.changes)}`);
  } catch (err) {
    result.error = err instanceof Error ? err.message : String(err);
    o.log(`error: ${result.error}`);
  } finally {
    unnice();
    await prover.close();
    await svc.stop().catch(() => {});
    rmSync(dir, { recursive: true, force: true });
  }
  return result as NetworksResult;
}
