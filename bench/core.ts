// Benchmark of the parts that exist today: the pure pipeline (validate -> render -> plan) and the durable
// store, at 10, 100, 1000 and 5000 routes. Prints a Markdown table; takes about a minute.
// Run: npx tsx bench/core.ts
import { mkdtempSync, rmSync } from 'node:fs';
import { cpus, tmpdir, totalmem } from 'node:os';
import { join } from 'node:path';
import { DEFAULT_RENDER_OPTIONS, renderDesired } from '../src/haproxy/render.js';
import { plan } from '../src/plan/plan.js';
import { type RouteClaim, resolveRoutes } from '../src/routes/route.js';
import { ClusterStore } from '../src/store/cluster-store.js';
import { applyToState } from '../test/contract/oracle.js';

const SIZES = [10, 100, 1000, 5000];
const NODES = ['10.0.0.1', '10.0.0.2', '10.0.0.3'];

function claims(n: number, nodes = NODES): RouteClaim[] {
  return Array.from({ length: n }, (_, i) => ({
    cluster: `cluster-${i}`,
    host: `api.c${i}.example.com`,
    endpoints: nodes.map((address) => ({ address, port: 30000 + (i % 2700) })),
    claimedAt: i,
  }));
}

function time<T>(fn: () => T, repeat = 5): { ms: number; result: T } {
  let result = fn();
  const started = process.hrtime.bigint();
  for (let i = 0; i < repeat; i++) result = fn();
  return { ms: Number(process.hrtime.bigint() - started) / 1e6 / repeat, result };
}

const pipeline = (c: RouteClaim[]) => renderDesired(resolveRoutes(c).routes, DEFAULT_RENDER_OPTIONS);

async function storeLatency(n: number): Promise<{ sequentialMs: number; burstMs: number }> {
  const dir = mkdtempSync(join(tmpdir(), 'kubebyon-bench-'));
  try {
    const store = await ClusterStore.open(join(dir, 'clusters.json'));
    await store.replaceAll(
      Array.from({ length: n }, (_, i) => ({
        name: `cluster-${i}`,
        host: `api.c${i}.example.com`,
        target: { nodePort: 30000 + (i % 2700) },
      })),
    );
    const seqStart = process.hrtime.bigint();
    for (let i = 0; i < 20; i++)
      await store.upsert({
        name: `cluster-${i}`,
        host: `api.c${i}.example.com`,
        target: { nodePort: 31000 },
      });
    const sequentialMs = Number(process.hrtime.bigint() - seqStart) / 1e6 / 20;
    const burstStart = process.hrtime.bigint();
    await Promise.all(
      Array.from({ length: 200 }, (_, i) =>
        store.upsert({ name: `burst-${i}`, host: `api.b${i}.example.com`, target: { nodePort: 32000 } }),
      ),
    );
    const burstMs = Number(process.hrtime.bigint() - burstStart) / 1e6;
    return { sequentialMs, burstMs };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const rows: string[] = [];
for (const n of SIZES) {
  const base = claims(n);
  const desired = pipeline(base);
  const render = time(() => pipeline(base));
  const cold = time(() => plan(desired, { frontends: [], backends: [] }));
  const current = applyToState({ frontends: [], backends: [] }, cold.result.operations);
  const noop = time(() => plan(desired, current));
  const changed = [...base];
  changed[0] = { ...(changed[0] as RouteClaim), endpoints: [{ address: '10.0.0.9', port: 30000 }] };
  const one = time(() => plan(pipeline(changed), current));
  const moved = pipeline(claims(n, ['10.0.0.1', '10.0.0.2', '10.0.0.4']));
  const endpointOnly = time(() => plan(moved, current));
  const store = await storeLatency(n);
  rows.push(
    `| ${n} | ${render.ms.toFixed(2)} | ${cold.ms.toFixed(2)} (${cold.result.operations.length} ops) | ${noop.ms.toFixed(2)} (${noop.result.operations.length} ops) | ${one.ms.toFixed(2)} (${one.result.operations.length} ops) | ${endpointOnly.ms.toFixed(2)} (${endpointOnly.result.operations.length} ops, ${endpointOnly.result.operations.filter((o) => o.kind === 'update_server').length} server updates) | ${store.sequentialMs.toFixed(2)} | ${store.burstMs.toFixed(0)} |`,
  );
}

console.log(
  `machine: ${cpus().length} x ${cpus()[0]?.model ?? 'cpu'}, ${(totalmem() / 2 ** 30).toFixed(0)} GiB, Node ${process.version}`,
);
console.log(
  `heap used after the run: ${(process.memoryUsage().heapUsed / 2 ** 20).toFixed(0)} MiB, RSS ${(process.memoryUsage().rss / 2 ** 20).toFixed(0)} MiB\n`,
);
console.log(
  '| routes | validate+render ms | plan from empty ms | no-op plan ms | one-route change ms | one node moved (all routes) ms | store upsert ms (sequential, fsync) | 200 concurrent upserts ms |',
);
console.log('| --- | --- | --- | --- | --- | --- | --- | --- |');
for (const r of rows) console.log(r);
