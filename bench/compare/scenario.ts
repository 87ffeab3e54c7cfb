import { statSync } from 'node:fs';
import { loadavg } from 'node:os';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Approach, ApproachName, Cluster } from './approaches.js';
import type { Counts } from './counting-proxy.js';
import { type IdentityServers, until, untilAll, watchers } from './identity.js';
import type { Resources } from './service.js';
import type { ProviderName, Target } from './targets.js';

export interface Usage {
  requests: number;
  /** Non-GET requests (Data Plane API only; -1 where not countable). */
  writes: number;
  /** `POST /transactions` seen (Data Plane API only). */
  transactions: number;
  bytes: number;
  reloads: number;
  /** Plans applied: transactions, raw pushes or file rewrites, whichever the approach uses. */
  applies: number;
}

export interface RunResult {
  provider: ProviderName;
  n: number;
  approach: ApproachName;
  startedAt: string;
  load: { before: number[]; after: number[] };
  cold: { applyMs: number; routableMs: number | null; sampled: number; missing: number; usage: Usage };
  change: {
    count: number;
    latenciesMs: Array<number | null>;
    p50: number | null;
    p95: number | null;
    /** Per change, mean and max over the changes. */
    mean: Usage;
    max: Usage;
    /** Ours: mean milliseconds per change spent in each phase of the passes (render, read, plan, apply). */
    phasesMs?: Record<string, number>;
  };
  burst: {
    count: number;
    windowMs: number;
    convergeMs: number | null;
    /** Changes dropped because the baseline's time cap passed (then convergeMs is null). */
    dropped: number;
    extrapolatedMs: number | null;
    missing: number;
    usage: Usage;
    heldConnections: number;
    workersAfter: number;
  };
  move: { convergeMs: number | null; sampled: number; missing: number; usage: Usage };
  noop: { ms: number; usage: Usage; ownedFileReplaced: boolean | null };
  resources: Record<string, Resources>;
  error?: string;
}

export interface ScenarioOptions {
  n: number;
  changes: number;
  burst: number;
  /** How long a slow approach may take over the burst or the move before the rest is dropped. */
  capMs: number;
  /** Node addresses before and after the move. */
  from: string;
  to: string;
  servers: IdentityServers;
  log: (line: string) => void;
}

const pad = (i: number, w: number) => String(i).padStart(w, '0');
const DOMAIN = 'bench.example.com';

export function clusterAt(i: number, prefix: string, width: number, ports: number[]): Cluster {
  const name = `${prefix}${pad(i, width)}`;
  return { name, host: `${name}.${DOMAIN}`, nodePort: ports[i % ports.length] as number };
}

const expected = (c: Cluster, address: string) => `${address}:${c.nodePort} ${c.host}`;

/** Evenly spread members of `list`, first and last included. */
function sample<T>(list: T[], k: number): T[] {
  if (list.length <= k) return [...list];
  return Array.from({ length: k }, (_, i) => list[Math.round((i * (list.length - 1)) / (k - 1))] as T);
}

function percentile(values: number[], p: number): number | null {
  if (values.length === 0) return null;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)] ?? null;
}

interface Mark {
  counts: Counts;
  loads: number;
  applies: number;
}

async function mark(a: Approach, t: Target): Promise<Mark> {
  return { counts: await a.counts(), loads: await t.loads(), applies: await a.applies() };
}

async function usageSince(m: Mark, a: Approach, t: Target): Promise<Usage> {
  const now = await mark(a, t);
  return {
    requests: now.counts.requests - m.counts.requests,
    writes: now.counts.writes < 0 ? -1 : now.counts.writes - m.counts.writes,
    transactions: now.counts.transactions - m.counts.transactions,
    bytes: now.counts.bytesSent + now.counts.bytesReceived - m.counts.bytesSent - m.counts.bytesReceived,
    reloads: now.loads - m.loads,
    applies: now.applies - m.applies,
  };
}

const round = (ms: number | null) => (ms === null ? null : Math.round(ms));

/** The six measurements, in order, on one approach against one fresh HAProxy. */
export async function runScenario(
  approach: Approach,
  target: Target,
  o: ScenarioOptions,
): Promise<RunResult> {
  const ports = o.servers.ports;
  const existing = Array.from({ length: o.n }, (_, i) => clusterAt(i, 'c', 5, ports));
  const added: Cluster[] = [];
  const resources: Record<string, Resources> = {};
  const snap = async (phase: string) => {
    const r = approach.resources?.();
    if (r) resources[phase] = { ...r, heapUsedMb: await approach.heapUsedMb?.() };
  };
  const result: Partial<RunResult> = {
    provider: target.provider,
    n: o.n,
    approach: approach.name,
    startedAt: new Date().toISOString(),
    load: { before: loadavg(), after: [] },
    resources,
  };
  const port = target.sniPort;

  // 1. Cold sync: empty HAProxy -> all N routable.
  {
    const m = await mark(approach, target);
    const t0 = performance.now();
    const probes = sample(existing, 50).map((c) => ({ host: c.host, expected: expected(c, o.from) }));
    const routable = untilAll(port, probes, t0, Date.now() + 900_000, 4);
    await approach.putAll(existing);
    const applyMs = performance.now() - t0;
    const r = await routable;
    await approach.settle();
    result.cold = {
      applyMs: Math.round(applyMs),
      routableMs: round(r.ms),
      sampled: probes.length,
      missing: r.missing,
      usage: await usageSince(m, approach, target),
    };
    await snap('cold');
    o.log(`cold sync: ${JSON.stringify(result.cold)}`);
  }

  // 2. One change at a time: a new cluster, webhook (or apply) -> routable.
  {
    const latencies: Array<number | null> = [];
    const usages: Usage[] = [];
    const phasesBefore = await approach.phases?.();
    for (let k = 0; k < o.changes; k++) {
      const c = clusterAt(k, 'a', 3, ports);
      added.push(c);
      const m = await mark(approach, target);
      const t0 = performance.now();
      const applied = approach.upsert(c);
      const ms = await until(port, c.host, expected(c, o.from), t0, Date.now() + 300_000);
      await applied;
      await approach.settle();
      latencies.push(round(ms));
      usages.push(await usageSince(m, approach, target));
    }
    const done = latencies.filter((x): x is number => x !== null);
    const keys = ['requests', 'writes', 'transactions', 'bytes', 'reloads', 'applies'] as const;
    const mean = Object.fromEntries(
      keys.map((k) => [k, Math.round((usages.reduce((s, u) => s + u[k], 0) / usages.length) * 10) / 10]),
    ) as unknown as Usage;
    const max = Object.fromEntries(
      keys.map((k) => [k, Math.max(...usages.map((u) => u[k]))]),
    ) as unknown as Usage;
    result.change = {
      count: o.changes,
      latenciesMs: latencies,
      p50: percentile(done, 50),
      p95: percentile(done, 95),
      mean,
      max,
    };
    const phasesAfter = await approach.phases?.();
    if (phasesBefore && phasesAfter)
      result.change.phasesMs = Object.fromEntries(
        Object.entries(phasesAfter).map(([phase, s]) => [
          phase,
          Math.round(((s - (phasesBefore[phase] ?? 0)) * 1000) / o.changes),
        ]),
      );
    await snap('changes');
    o.log(`one change: p50 ${result.change.p50} p95 ${result.change.p95} mean ${JSON.stringify(mean)}`);
  }

  // 3. Burst: `burst` new clusters within one second, with long-lived connections open meanwhile.
  {
    // Clients keep opening long-lived connections (watches) while the burst is applied.
    const held = await watchers(
      port,
      sample(existing.length > 0 ? existing : added, 50).map((c) => c.host),
      100,
      300,
    );
    const burst = Array.from({ length: o.burst }, (_, k) => clusterAt(k, 'b', 3, ports));
    const m = await mark(approach, target);
    const windowMs = 1_000;
    const t0 = performance.now();
    approach.dropAfter(Date.now() + o.capMs);
    const probes = burst.map((c) => ({ host: c.host, expected: expected(c, o.from) }));
    const converged = untilAll(port, probes, t0, Date.now() + o.capMs + 30_000, 8);
    const applied: Array<Promise<unknown>> = [];
    for (let k = 0; k < burst.length; k++) {
      const at = t0 + (k * windowMs) / burst.length;
      const wait = at - performance.now();
      if (wait > 0) await sleep(wait);
      applied.push(approach.upsert(burst[k] as Cluster).catch((err) => o.log(`burst upsert: ${err}`)));
    }
    const sentMs = performance.now() - t0;
    const r = await converged;
    await Promise.all(applied);
    const elapsed = performance.now() - t0;
    await approach.settle();
    const dropped = approach.dropped();
    approach.dropAfter(Number.POSITIVE_INFINITY);
    const heldConnections = held.stop();
    const workersAfter = await target.workers();
    held.close();
    added.push(...burst);
    const appliedCount = o.burst - dropped;
    result.burst = {
      count: o.burst,
      windowMs: Math.round(sentMs),
      convergeMs: dropped === 0 ? round(r.ms) : null,
      dropped,
      extrapolatedMs: dropped > 0 && appliedCount > 0 ? Math.round((elapsed * o.burst) / appliedCount) : null,
      missing: r.missing,
      usage: await usageSince(m, approach, target),
      heldConnections,
      workersAfter,
    };
    if (dropped > 0) {
      // What was dropped is applied now, untimed, so that the next phases start from the same routes.
      await approach.upsert(burst[burst.length - 1] as Cluster);
      await approach.settle();
    }
    await snap('burst');
    o.log(`burst: ${JSON.stringify(result.burst)}`);
  }

  // 4. Endpoint move: the node's address changes under every route.
  {
    const everyone = [...existing, ...added];
    const probes = sample(everyone, 50).map((c) => ({ host: c.host, expected: expected(c, o.to) }));
    const m = await mark(approach, target);
    const t0 = performance.now();
    const moved = approach.moveNode(o.to);
    const r = await untilAll(port, probes, t0, Date.now() + o.capMs * 4, 4);
    await moved;
    await approach.settle();
    result.move = {
      convergeMs: round(r.ms),
      sampled: probes.length,
      missing: r.missing,
      usage: await usageSince(m, approach, target),
    };
    await snap('move');
    o.log(`endpoint move: ${JSON.stringify(result.move)}`);
  }

  // 5. No-op resync: nothing changed.
  {
    const owned = target.stock?.ownedFile;
    const stamp = () => {
      if (!owned) return null;
      const s = statSync(owned, { bigint: true });
      return `${s.ino}:${s.mtimeNs}`;
    };
    const before = stamp();
    const m = await mark(approach, target);
    const t0 = performance.now();
    await approach.resync();
    const ms = performance.now() - t0;
    await approach.settle();
    const after = stamp();
    result.noop = {
      ms: Math.round(ms),
      usage: await usageSince(m, approach, target),
      ownedFileReplaced: before === null ? null : before !== after,
    };
    await snap('noop');
    o.log(`no-op resync: ${JSON.stringify(result.noop)}`);
  }
  result.load = { before: result.load?.before ?? [], after: loadavg() };
  return result as RunResult;
}
