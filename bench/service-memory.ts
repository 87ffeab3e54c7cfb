// The built service's memory and cold start at N clusters: a state file of N clusters, the service started
// on it (memory provider, static topology, map routing, the loop's debounce 0), timed until a pass has applied every
// route, then 20 signed webhook changes with ?wait=true (their p50 latency), then RSS (current and peak, from
// /proc) and the V8 heap (from /metrics). Bounded: 180 s per size at most. Loopback only.
// Run: npm run build (or tsc to another outDir), then
//   npx tsx bench/service-memory.ts <path to dist/cli/main.js> [sizes, e.g. 1000,5000,20000]
// (A third argument chose map or rules routing while KUBEBYON_HAPROXY_ROUTING was a setting: retired.)
// BENCH_NODE_ARGS (e.g. "--max-old-space-size=256") is passed to the service's node.
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { sign } from '../src/webhook/auth.js';

const main = process.argv[2] ?? '';
if (!main) throw new Error('usage: service-memory <dist/cli/main.js> [sizes]');
const SIZES = (process.argv[3] ?? '1000,5000,20000').split(',').map(Number);
const SECRET = 'a-long-enough-bench-secret';
const LIMIT_MS = 180_000;

const procStatus = (pid: number, key: string) => {
  const line = readFileSync(`/proc/${pid}/status`, 'utf8')
    .split('\n')
    .find((l) => l.startsWith(`${key}:`));
  return Number(line?.split(/\s+/)[1] ?? 0) / 1024;
};

async function put(base: string, name: string, host: string, port: number): Promise<number> {
  const path = `/v1/clusters/${name}?wait=true`;
  const raw = Buffer.from(
    JSON.stringify({ control_plane_host: host, public_access_mode: 'loadbalancer', node_port: port }),
  );
  const timestamp = String(Math.floor(Date.now() / 1000));
  const started = performance.now();
  const res = await fetch(`${base}${path}`, {
    method: 'PUT',
    headers: {
      'content-type': 'application/json',
      'x-kubebyon-timestamp': timestamp,
      'x-kubebyon-signature': sign(SECRET, timestamp, 'PUT', path, raw),
    },
    body: raw,
  });
  await res.text();
  if (res.status >= 300) throw new Error(`PUT ${name}: ${res.status}`);
  return performance.now() - started;
}

async function measure(n: number, port: number) {
  const dir = mkdtempSync(join(tmpdir(), 'kubebyon-mem-'));
  const clusters = Array.from({ length: n }, (_, i) => ({
    name: `cluster-${i}`,
    host: `api.c${i}.example.com`,
    target: { nodePort: 30000 + (i % 2700) },
    claimedAt: 1_700_000_000_000 + i,
    updatedAt: 1_700_000_000_000 + i,
  }));
  writeFileSync(join(dir, 'clusters.json'), JSON.stringify({ version: 1, clusters }));
  const started = performance.now();
  const child = spawn(
    process.execPath,
    [...(process.env.BENCH_NODE_ARGS?.split(' ').filter(Boolean) ?? []), main, 'serve'],
    {
      env: {
        PATH: process.env.PATH ?? '',
        KUBEBYON_PROVIDER: 'memory',
        KUBEBYON_STATIC_NODE_ADDRESSES: '10.0.0.1,10.0.0.2,10.0.0.3',
        KUBEBYON_STATE_FILE: join(dir, 'clusters.json'),
        KUBEBYON_LISTEN_ADDR: `127.0.0.1:${port}`,
        KUBEBYON_WEBHOOK_SECRET: SECRET,
        KUBEBYON_LOG_LEVEL: 'error',
      },
      stdio: ['ignore', 'ignore', 'inherit'],
    },
  );
  const base = `http://127.0.0.1:${port}`;
  try {
    // Ready, then routable: the first pass has applied every route (a webhook with ?wait=true waits for it).
    for (;;) {
      if (performance.now() - started > LIMIT_MS) throw new Error(`N=${n}: not ready in time`);
      const ok = await fetch(`${base}/readyz`).then(
        (r) => r.status === 200,
        () => false,
      );
      if (ok) break;
      await sleep(100);
    }
    await put(base, 'probe', 'api.probe.example.com', 32000);
    const coldStartS = (performance.now() - started) / 1000;
    // The passes' own time (reconcile_duration_seconds) during the adds, apart from storing and answering.
    const passTime = async () => {
      const text = await (await fetch(`${base}/metrics`)).text();
      const sum = Number(
        /^kubebyon_haproxy_adapter_reconcile_duration_seconds_sum (\S+)/m.exec(text)?.[1] ?? 0,
      );
      const count = Number(
        /^kubebyon_haproxy_adapter_reconcile_duration_seconds_count (\S+)/m.exec(text)?.[1] ?? 0,
      );
      return { sum, count };
    };
    const passesBefore = await passTime();
    const latencies: number[] = [];
    for (let i = 0; i < 20; i++)
      latencies.push(await put(base, `new-${i}`, `api.new${i}.example.com`, 31000 + i));
    latencies.sort((a, b) => a - b);
    const passesAfter = await passTime();
    const passMs =
      (1000 * (passesAfter.sum - passesBefore.sum)) / Math.max(1, passesAfter.count - passesBefore.count);
    const metrics = await (await fetch(`${base}/metrics`)).text();
    const heap = Number(/^nodejs_heap_size_used_bytes (\S+)/m.exec(metrics)?.[1] ?? 0) / 2 ** 20;
    const pid = child.pid as number;
    return {
      n,
      coldStartS,
      p50: latencies[10] ?? 0,
      max: latencies[19] ?? 0,
      passMs,
      rss: procStatus(pid, 'VmRSS'),
      peak: procStatus(pid, 'VmHWM'),
      heap,
    };
  } finally {
    child.kill(process.env.BENCH_NODE_ARGS ? 'SIGTERM' : 'SIGKILL');
    if (process.env.BENCH_NODE_ARGS) await new Promise((r) => child.once('exit', r));
    rmSync(dir, { recursive: true, force: true });
  }
}

const rows: string[] = [];
for (const [i, n] of SIZES.entries()) {
  const r = await measure(n, 18_700 + i);
  rows.push(
    `| ${r.n} | ${r.coldStartS.toFixed(1)} | ${r.p50.toFixed(1)} | ${r.max.toFixed(1)} | ${r.passMs.toFixed(1)} | ${r.rss.toFixed(0)} | ${r.peak.toFixed(0)} | ${r.heap.toFixed(0)} |`,
  );
  console.error(rows[rows.length - 1]);
}
console.log(`service: ${main}, map routing, memory provider, static topology\n`);
console.log(
  '| N | cold start to routable s | webhook ?wait=true p50 ms (20 adds) | max ms | pass ms (mean) | RSS MiB | peak RSS MiB | V8 heap used MiB |',
);
console.log('| --- | --- | --- | --- | --- | --- | --- | --- |');
for (const r of rows) console.log(r);
