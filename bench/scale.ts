// Benchmark of one webhook-driven pass's parts at scale, in map routing: the pure pipeline (desired routes
// from records + topology, render), the planner (no-op, one new route, one deleted), applyOperations of a
// small plan to a large state, registry.interpret, and a durable store upsert. Prints a Markdown table and
// the heap/RSS after each size; then a scoped pass (runScopedPass on the memory provider: memo update, routing
// index, scoped plan, apply, result merge) adding, moving and deleting one route. Bounded: a few repeats per
// cell, at most about two minutes in all.
// Run: npx tsx bench/scale.ts [sizes, e.g. 10,1000,5000,20000]
import { mkdtempSync, rmSync } from 'node:fs';
import { cpus, tmpdir, totalmem } from 'node:os';
import { join } from 'node:path';
import type { HaproxyState, RawState } from '../src/haproxy/model.js';
import { renderDesired } from '../src/haproxy/render.js';
import type { ClusterRecord } from '../src/model/cluster.js';
import { applyOperations } from '../src/plan/apply.js';
import { plan } from '../src/plan/plan.js';
import { desiredRoutes } from '../src/reconcile/desired.js';
import { desiredConfig } from '../src/reconcile/pass.js';
import { ClusterStore } from '../src/store/cluster-store.js';
import { RENDER, registry, scopedBed, topology } from './scoped-bed.js';

const SIZES = (process.argv[2] ?? '10,1000,5000,20000').split(',').map(Number);

function record(i: number, now = 1_700_000_000_000): ClusterRecord {
  return {
    name: `cluster-${i}`,
    host: `api.c${i}.example.com`,
    target: { nodePort: 30000 + (i % 2700) },
    claimedAt: now + i,
    updatedAt: now + i,
  };
}

/** Median of `repeat` timed runs after one warm-up (ms). */
function time<T>(fn: () => T, repeat = 7): { ms: number; result: T } {
  let result = fn();
  const samples: number[] = [];
  for (let i = 0; i < repeat; i++) {
    const started = process.hrtime.bigint();
    result = fn();
    samples.push(Number(process.hrtime.bigint() - started) / 1e6);
  }
  samples.sort((a, b) => a - b);
  return { ms: samples[Math.floor(samples.length / 2)] ?? 0, result };
}

async function storeUpsert(n: number): Promise<number> {
  const dir = mkdtempSync(join(tmpdir(), 'kubebyon-scale-'));
  try {
    const store = await ClusterStore.open(join(dir, 'clusters.json'));
    await store.replaceAll(Array.from({ length: n }, (_, i) => record(i)));
    const samples: number[] = [];
    for (let i = 0; i < 20; i++) {
      const started = process.hrtime.bigint();
      await store.upsert({ name: `new-${i}`, host: `api.n${i}.example.com`, target: { nodePort: 31000 } });
      samples.push(Number(process.hrtime.bigint() - started) / 1e6);
    }
    samples.sort((a, b) => a - b);
    return samples[10] ?? 0;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Median ms of scoped passes that add one route, move its endpoints, and delete it again (ops of each). */
async function scopedPasses(n: number) {
  const records = new Map(Array.from({ length: n }, (_, i) => [`cluster-${i}`, record(i)]));
  const bed = await scopedBed(records);
  const samples = { add: [] as number[], move: [] as number[], del: [] as number[] };
  const ops = { add: 0, move: 0, del: 0 };
  const step = async (which: keyof typeof samples, change: () => void) => {
    change();
    const started = process.hrtime.bigint();
    await bed.change('probe');
    samples[which].push(Number(process.hrtime.bigint() - started) / 1e6);
    ops[which] = bed.memory.applies.at(-1)?.operations.length ?? 0;
  };
  const probe = (port: number): ClusterRecord => ({
    ...record(n + 1),
    name: 'probe',
    target: { nodePort: port },
  });
  for (let i = 0; i < 9; i++) {
    await step('add', () => records.set('probe', probe(31000)));
    await step('move', () => records.set('probe', probe(31001)));
    await step('del', () => records.delete('probe'));
  }
  const median = (xs: number[]) => xs.sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? 0;
  return { add: median(samples.add), move: median(samples.move), del: median(samples.del), ops };
}

const mib = (bytes: number) => (bytes / 2 ** 20).toFixed(0);
const fmt = (ms: number) => ms.toFixed(2);
const rows: string[] = [];
const scopedRows: string[] = [];
for (const n of SIZES) {
  const records = Array.from({ length: n }, (_, i) => record(i));
  // Cold: every record validated and rendered. A webhook pass: the same records but one new (memoized).
  const render = time(() => ({ config: renderDesired(desiredRoutes(records, topology).routes, RENDER) }));
  const plusOne = [...records, record(n)];
  let flip = false;
  const webhook = time(() => {
    flip = !flip;
    return desiredConfig(flip ? plusOne : records, topology, RENDER);
  });
  const config = desiredConfig(records, topology, RENDER).config;
  const empty = registry.interpret({ frontends: [], backends: [] });
  const cold = plan(config, empty);
  // What a full read of HAProxy gives the registry once the routes run (raw objects: their tags, no `owned`).
  const raw: RawState = stripOwned(applyOperations(empty, cold.operations, registry).state);
  const interpret = time(() => registry.interpret(raw));
  const current = interpret.result;
  const noop = time(() => plan(config, current));
  const added = desiredConfig(plusOne, topology, RENDER).config;
  const addOne = time(() => plan(added, current, { grow: 'when_needed' }));
  const removed = desiredConfig(records.slice(1), topology, RENDER).config;
  const deleteOne = time(() => plan(removed, current, { grow: 'when_needed' }));
  const applySmall = time(() => applyOperations(current, addOne.result.operations, registry));
  const upsert = await storeUpsert(n);
  const scoped = await scopedPasses(n);
  scopedRows.push(
    `| ${n} | ${fmt(scoped.add)} (${scoped.ops.add}) | ${fmt(scoped.move)} (${scoped.ops.move}) | ${fmt(scoped.del)} (${scoped.ops.del}) |`,
  );
  const mem = process.memoryUsage();
  rows.push(
    `| ${n} | ${fmt(render.ms)} | ${fmt(webhook.ms)} | ${fmt(noop.ms)} (${noop.result.operations.length}) | ${fmt(addOne.ms)} (${addOne.result.operations.length}) | ${fmt(deleteOne.ms)} (${deleteOne.result.operations.length}) | ${fmt(applySmall.ms)} | ${fmt(interpret.ms)} | ${fmt(upsert)} | ${fmt(webhook.ms + interpret.ms + addOne.ms + applySmall.ms)} | ${mib(mem.heapUsed)} / ${mib(mem.rss)} |`,
  );
}

console.log(
  `machine: ${cpus().length} x ${cpus()[0]?.model ?? 'cpu'}, ${(totalmem() / 2 ** 30).toFixed(0)} GiB, Node ${process.version}\n`,
);
console.log(
  '| N | validate+render ms (cold) | validate+render ms (+1 record, memoized) | no-op plan ms (ops) | plan +1 route ms (ops) | plan −1 route ms (ops) | applyOperations(+1) ms | registry.interpret ms | store upsert ms (p50, fsync) | pure part of one pass ms | heap / RSS MiB after |',
);
console.log('| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |');
for (const r of rows) console.log(r);
console.log('\nScoped passes (runScopedPass on the memory provider, its apply included):\n');
console.log(
  '| N | scoped pass +1 route ms (ops) | scoped pass move ms (ops) | scoped pass −1 route ms (ops) |',
);
console.log('| --- | --- | --- | --- |');
for (const r of scopedRows) console.log(r);

/** `state` as a provider reads it: every object with its tags, no ownership decided yet. */
function stripOwned(state: HaproxyState): RawState {
  return {
    frontends: state.frontends.map(({ owned: _, rules, ...f }) => ({
      ...f,
      rules: rules.map(({ owned: __, ...r }) => r),
    })),
    backends: state.backends.map(({ owned: _, cluster: __, servers, ...b }) => ({
      ...b,
      servers: servers.map(({ owned: ___, ...srv }) => srv),
    })),
    ...(state.maps ? { maps: state.maps } : {}),
  };
}
