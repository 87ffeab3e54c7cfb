// What one cluster change costs at N routes, in CPU and in garbage (map routing, no docker, no HAProxy).
// A change is a scoped pass as a webhook triggers it: `runScopedPass` on the memory provider behind the
// ownership layer (memo update, scope, routing index advanced, scoped plan, ownership check,
// `applyOperations`, result merge). Changes cycle add / move (endpoints) / delete of probe clusters.
// Per change: wall time (GC pauses included) and bytes allocated (the V8 heap's growth over a change that
// ran no GC; those that did are left out of the byte figures). Then the stock provider's persistence render
// (owned file + map file, `persist.ts`), which runs once per batch of changes, after one change each (the
// set of the names in the file, which the provider keeps, is made outside the timing).
// Bounded: 200 changes per size (after 30 unrecorded), at most ~60 s per size.
// Run: npx tsx bench/change-cost.ts [sizes, e.g. 1000,5000,20000] [changes, default 200]
import { cpus, totalmem } from 'node:os';
import v8 from 'node:v8';
import type { ClusterRecord } from '../src/model/cluster.js';
import { renderMapFile } from '../src/providers/haproxy/map-file.js';
import { renderOwnedFile } from '../src/providers/haproxy/owned-file.js';
import { fileStateOf } from '../src/providers/haproxy/persist.js';
import { scopedBed } from './scoped-bed.js';

const SIZES = (process.argv[2] ?? '1000,5000,20000').split(',').map(Number);
const CHANGES = Number(process.argv[3] ?? 200);
const WARMUP = 30;
const PERSISTS = 20;
const BUDGET_MS = 60_000;
const NOW = 1_700_000_000_000;

const record = (name: string, i: number, port = 30000 + (i % 2700)): ClusterRecord => ({
  name,
  host: `api.${name}.example.com`,
  target: { nodePort: port },
  claimedAt: NOW + i,
  updatedAt: NOW + i,
});

interface Sample {
  us: number;
  /** Heap growth over the change; undefined when a GC ran during it. */
  bytes: number | undefined;
  gcPauseUs: number;
}

/** Runs `fn` once, timed, with its allocation (when no GC ran meanwhile) and the GC pauses it took. */
async function measured(fn: () => Promise<void>): Promise<Sample> {
  const gc = new v8.GCProfiler();
  gc.start();
  const before = v8.getHeapStatistics().used_heap_size;
  const started = process.hrtime.bigint();
  await fn();
  const us = Number(process.hrtime.bigint() - started) / 1e3;
  const after = v8.getHeapStatistics().used_heap_size;
  const events = gc.stop().statistics;
  const gcPauseUs = events.reduce((sum, e) => sum + e.cost, 0);
  return { us, bytes: events.length === 0 ? after - before : undefined, gcPauseUs };
}

const KINDS = ['add', 'move', 'delete'] as const;
type Kind = (typeof KINDS)[number];

async function sizeRun(n: number) {
  const records = new Map<string, ClusterRecord>();
  for (let i = 0; i < n; i++) records.set(`c${i}`, record(`c${i}`, i));
  const bed = await scopedBed(records);
  const memory = bed.memory;

  let k = 0;
  /** The k-th change: probe k/3 is added, its endpoints moved, then deleted. */
  const change = async (): Promise<Kind> => {
    const which = KINDS[k % 3] as Kind;
    const name = `probe${Math.floor(k / 3)}`;
    k++;
    if (which === 'delete') records.delete(name);
    else records.set(name, record(name, n + k, which === 'add' ? 31000 : 31001));
    const report = await bed.change(name);
    if (!report.changed) throw new Error(`change ${which} of ${name} applied nothing`);
    return which;
  };

  const deadline = Date.now() + BUDGET_MS;
  for (let i = 0; i < WARMUP; i++) await change();
  const samples = new Map<Kind | 'all', Sample[]>();
  for (const x of ['all', ...KINDS] as const) samples.set(x, []);
  for (let i = 0; i < CHANGES && Date.now() < deadline; i++) {
    let which: Kind = 'add';
    const s = await measured(async () => {
      which = await change();
    });
    samples.get(which)?.push(s);
    samples.get('all')?.push(s);
  }

  // The stock provider's persistence, after one change each: owned file and map file rendered in full.
  // The first render (every section rendered, not yet kept with its backend) is left out, as a warm-up.
  const persists: Sample[] = [];
  const dir = '/var/lib/kubebyon';
  const persist = () => {
    const state = memory.state;
    const inFile = new Set([...state.frontends, ...state.backends].map((p) => p.name));
    return measured(async () => {
      renderOwnedFile(fileStateOf(state, inFile), undefined, dir);
      renderMapFile(state.maps?.[0]?.entries ?? new Map());
    });
  };
  await persist();
  for (let i = 0; i < PERSISTS && Date.now() < deadline; i++) {
    await change();
    persists.push(await persist());
  }
  return { samples, persists, heap: v8.getHeapStatistics().used_heap_size };
}

const pct = (xs: number[], p: number) => {
  const sorted = [...xs].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((sorted.length * p) / 100))] ?? Number.NaN;
};
const kb = (b: number) => (Number.isNaN(b) ? 'n/a (GC in each)' : (b / 1024).toFixed(1));
const us = (x: number) => x.toFixed(0);

function row(n: number, what: string, xs: Sample[]): string {
  const times = xs.map((s) => s.us);
  const bytes = xs.flatMap((s) => (s.bytes === undefined ? [] : [s.bytes]));
  const gcs = xs.filter((s) => s.gcPauseUs > 0);
  const gcMax = Math.max(0, ...xs.map((s) => s.gcPauseUs));
  return `| ${n} | ${what} | ${xs.length} | ${us(pct(times, 50))} | ${us(pct(times, 99))} | ${us(Math.max(...times))} | ${kb(pct(bytes, 50))} | ${kb(bytes.length === 0 ? Number.NaN : bytes.reduce((a, b) => a + b, 0) / bytes.length)} | ${gcs.length} / ${us(gcMax)} |`;
}

const lines: string[] = [];
for (const n of SIZES) {
  const { samples, persists, heap } = await sizeRun(n);
  for (const [what, xs] of samples) lines.push(row(n, what, xs));
  lines.push(row(n, 'persist render (per batch)', persists));
  lines.push(`|  | heap after: ${(heap / 2 ** 20).toFixed(0)} MiB |  |  |  |  |  |  |  |`);
}
console.log(
  `machine: ${cpus().length} x ${cpus()[0]?.model ?? 'cpu'}, ${(totalmem() / 2 ** 30).toFixed(0)} GiB, Node ${process.version}, ${new Date().toISOString().slice(0, 10)}\n`,
);
console.log(
  '| N | change | count | p50 µs | p99 µs | max µs | KiB allocated p50 | KiB allocated mean | changes with GC / longest GC µs |',
);
console.log('| --- | --- | --- | --- | --- | --- | --- | --- | --- |');
for (const l of lines) console.log(l);
