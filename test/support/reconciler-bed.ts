import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setImmediate } from 'node:timers/promises';
import pino from 'pino';
import { vi } from 'vitest';
import type { RenderOptions } from '../../src/haproxy/render.js';
import type { Metrics } from '../../src/metrics/metrics.js';
import { MemoryProvider } from '../../src/providers/memory/memory-provider.js';
import { Reconciler } from '../../src/reconcile/reconciler.js';
import { OwnedProvider } from '../../src/registry/owned-provider.js';
import { ClusterStore } from '../../src/store/cluster-store.js';
import { StaticTopology } from '../../src/topology/topology.js';
import { registry } from './owner.js';

// The loop's time is fake (vitest's timers drive the Reconciler's default clock): a test says how much time
// passes, instead of racing the wall clock. Real I/O (the store's fsync) still runs in real time.
const FAKED = ['setTimeout', 'clearTimeout', 'setInterval', 'clearInterval', 'Date'] as const;
const STEP_MS = 5;

/** Lets fake time run, as the wall clock would, until `p` settles; fails after `limitMs` of it. */
export async function settle<T>(p: Promise<T>, limitMs = 120_000): Promise<T> {
  let done = false;
  const tracked = p.finally(() => {
    done = true;
  });
  // Time moves only while the loop waits for it: a step never overshoots what `p` needed.
  for (let t = 0; t <= limitMs; t += STEP_MS) {
    await setImmediate();
    if (done) return tracked;
    await vi.advanceTimersByTimeAsync(STEP_MS);
  }
  throw new Error(`still pending after ${limitMs} ms of fake time`);
}

/** Whether `p` has settled after `ms` of fake time. */
export async function settledWithin(p: Promise<unknown>, ms: number): Promise<boolean> {
  let done = false;
  void p.finally(() => {
    done = true;
  });
  await vi.advanceTimersByTimeAsync(ms);
  await setImmediate();
  return done;
}

/** What a reconciler test starts from: a store in a folder of its own and an empty in-memory HAProxy. */
export interface ReconcilerBed {
  dir: string;
  store: ClusterStore;
  provider: MemoryProvider;
}

/** Fake time on, then a fresh bed; for `beforeEach`. */
export async function openReconcilerBed(prefix: string): Promise<ReconcilerBed> {
  vi.useFakeTimers({ toFake: [...FAKED] });
  const dir = mkdtempSync(join(tmpdir(), prefix));
  return { dir, store: await ClusterStore.open(join(dir, 'state.json')), provider: new MemoryProvider() };
}

/** Stops the test's reconciler (in fake time), then real time again and the folder gone; for `afterEach`. */
export async function closeReconcilerBed(dir: string, reconciler: Reconciler | undefined): Promise<void> {
  if (reconciler) await settle(reconciler.stop());
  vi.useRealTimers();
  rmSync(dir, { recursive: true, force: true });
}

/**
 * A Reconciler over `bed` as the map-routing tests drive it: two static nodes, the owner's registry, a 20 ms
 * debounce, no resync; its log lines (parsed) go to `logs`.
 */
export function reconcilerOn(
  bed: { store: ClusterStore; provider: MemoryProvider },
  o: { render: RenderOptions; metrics: Metrics; logs: unknown[]; watchMs?: number },
): Reconciler {
  const sink = { write: (line: string) => void o.logs.push(JSON.parse(line)) };
  return new Reconciler({
    store: bed.store,
    topology: new StaticTopology(['10.0.0.1', '10.0.0.2']),
    provider: new OwnedProvider(bed.provider, registry),
    render: o.render,
    metrics: o.metrics,
    logger: pino({ level: 'debug' }, sink),
    debounceMs: 20,
    maxDelayMs: 2000,
    resyncIntervalMs: 0,
    retries: 3,
    publicPort: 443,
    ...(o.watchMs !== undefined ? { watchMs: o.watchMs } : {}),
  });
}
