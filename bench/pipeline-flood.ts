// Pipelined flood: connections that send thousands of pipelined `GET /metrics` and never read an answer,
// against the real service (startService, in-memory provider) in its own process, loopback only. For each
// scenario a fresh service is started; the script prints its RSS before, its peak RSS (VmHWM) and the latency
// of `/healthz` (a fresh connection every 250 ms) while the flood lasts, and how the flooding connections
// ended. Bounded: 10 s of flood per scenario, each /healthz probe at most 30 s.
// Run: npx tsx bench/pipeline-flood.ts
import { type ChildProcess, spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { cpus } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

const FLOOD_MS = 10_000;
const PROBE_EVERY_MS = 250;
const PROBE_TIMEOUT_MS = 30_000;
const SCENARIOS = [
  { connections: 1, requests: 5000 },
  { connections: 20, requests: 5000 },
];

function rssMiB(pid: number, field: 'VmRSS' | 'VmHWM'): number {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  return Number(new RegExp(`${field}:\\s+([0-9]+) kB`).exec(status)?.[1] ?? Number.NaN) / 1024;
}

async function startService(): Promise<{ child: ChildProcess; url: string }> {
  const child = spawn(process.execPath, ['--import', 'tsx', join(import.meta.dirname, 'flood-service.ts')], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const url = await new Promise<string>((resolve, reject) => {
    let out = '';
    const timer = setTimeout(() => reject(new Error('the service did not start within 30 s')), 30_000);
    child.stdout?.on('data', (d: Buffer) => {
      out += d.toString();
      const line = out.split('\n')[0];
      if (out.includes('\n') && line) {
        clearTimeout(timer);
        resolve(line.trim());
      }
    });
    child.once('exit', (code) => reject(new Error(`the service exited (${code})`)));
  });
  return { child, url };
}

interface Flood {
  socket: Socket;
  /** Whether the service closed the connection, found by reading once the flood is over. */
  closedByService: Promise<boolean>;
  /** Answers the client found in what it read then. */
  answers(): number;
}

/** One connection that sends `requests` pipelined GETs at once and reads nothing until `read()`. */
function flood(port: number, requests: number): Flood & { read(): void } {
  const socket = connect({ port, host: '127.0.0.1' });
  let received = '';
  let reading = false;
  socket.on('error', () => {});
  socket.pause();
  socket.write('GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n'.repeat(requests));
  const closedByService = new Promise<boolean>((resolve) => {
    socket.once('close', () => resolve(reading));
    // A paused socket sees neither the service's close nor its reset: read for a moment to find out.
    setTimeout(() => resolve(false), FLOOD_MS + 3_000).unref();
  });
  socket.on('data', (d: Buffer) => {
    received += d.toString('latin1');
    if (received.length > 1e6) received = received.slice(-1e5);
  });
  return {
    socket,
    closedByService,
    answers: () => received.split('HTTP/1.1 200').length - 1,
    read() {
      reading = true;
      socket.resume();
    },
  };
}

async function probe(url: string): Promise<number> {
  const started = performance.now();
  try {
    const res = await fetch(`${url}/healthz`, {
      signal: AbortSignal.timeout(PROBE_TIMEOUT_MS),
      headers: { connection: 'close' },
    });
    await res.arrayBuffer();
    return res.status === 200 ? performance.now() - started : Number.POSITIVE_INFINITY;
  } catch {
    return Number.POSITIVE_INFINITY;
  }
}

const fmt = (ms: number) => (Number.isFinite(ms) ? `${ms.toFixed(1)} ms` : `> ${PROBE_TIMEOUT_MS / 1000} s`);

async function scenario(connections: number, requests: number): Promise<string> {
  const { child, url } = await startService();
  const pid = child.pid as number;
  try {
    const port = Number(new URL(url).port);
    await probe(url);
    await sleep(500);
    const before = rssMiB(pid, 'VmRSS');
    const floods = Array.from({ length: connections }, () => flood(port, requests));
    const latencies: number[] = [];
    const until = Date.now() + FLOOD_MS;
    while (Date.now() < until) {
      latencies.push(await probe(url));
      await sleep(PROBE_EVERY_MS);
    }
    const peak = rssMiB(pid, 'VmHWM');
    for (const f of floods) f.read();
    const closed = (await Promise.all(floods.map((f) => f.closedByService))).filter(Boolean).length;
    const answers = floods.map((f) => f.answers());
    for (const f of floods) f.socket.destroy();
    const sorted = [...latencies].sort((a, b) => a - b);
    const p50 = sorted[Math.floor(sorted.length / 2)] ?? Number.NaN;
    const max = sorted[sorted.length - 1] ?? Number.NaN;
    const ended = `${closed} of ${connections} closed by the service; ${Math.min(...answers)}-${Math.max(...answers)} answers each`;
    return `| ${connections} x ${requests} | ${before.toFixed(0)} MiB | ${peak.toFixed(0)} MiB | ${latencies.length} | ${fmt(p50)} | ${fmt(max)} | ${ended} |`;
  } finally {
    child.kill('SIGTERM');
    await new Promise((r) => child.once('exit', r));
  }
}

async function main(): Promise<void> {
  console.log(
    `pipelined flood, ${cpus().length} CPUs, node ${process.version}, ${FLOOD_MS / 1000} s per scenario`,
  );
  console.log('');
  console.log(
    '| connections x pipelined GET /metrics | RSS before | peak RSS | /healthz probes | /healthz p50 | /healthz max | flooding connections |',
  );
  console.log('| --- | --- | --- | --- | --- | --- | --- |');
  for (const s of SCENARIOS) console.log(await scenario(s.connections, s.requests));
}

await main();
