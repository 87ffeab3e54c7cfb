import pino from 'pino';
import { DEFAULT_RENDER_OPTIONS, type RenderOptions } from '../src/haproxy/render.js';
import { createMetrics } from '../src/metrics/metrics.js';
import type { ClusterRecord } from '../src/model/cluster.js';
import { RoutingIndexCache } from '../src/plan/routing-index.js';
import { MemoryProvider } from '../src/providers/memory/memory-provider.js';
import { runPass } from '../src/reconcile/pass.js';
import { runScopedPass } from '../src/reconcile/scoped-pass.js';
import type { PassResult } from '../src/reconcile/status.js';
import { OwnedProvider } from '../src/registry/owned-provider.js';
import { Registry } from '../src/registry/registry.js';
import { StaticTopology } from '../src/topology/topology.js';

/** Three nodes, the default options (map routing): what the node-only benchmarks plan for. */
export const RENDER: RenderOptions = DEFAULT_RENDER_OPTIONS;
export const topology = new StaticTopology(['10.0.0.1', '10.0.0.2', '10.0.0.3']);
export const registry = new Registry();

/**
 * The clusters of `records` on the in-memory provider, as a webhook's pass finds them (a full pass from
 * nothing, then one more); `change(name)` runs the scoped pass a webhook for `name` runs, on `records` as they
 * are then. Throws when the pass declines to be scoped: the benchmarks measure scoped passes only.
 */
export async function scopedBed(records: ReadonlyMap<string, ClusterRecord>) {
  const memory = new MemoryProvider();
  const common = {
    topology,
    provider: new OwnedProvider(memory, registry),
    render: RENDER,
    signal: new AbortController().signal,
    logger: pino({ level: 'silent' }),
    metrics: createMetrics(),
    indexes: new RoutingIndexCache(),
  };
  let last: PassResult = (await runPass({ ...common, records: [...records.values()], retries: 0 })).result;
  last = (await runPass({ ...common, records: [...records.values()], retries: 0 })).result;
  const kind = { fresh: false, grow: 'when_needed' as const, repair: false };
  return {
    memory,
    async change(name: string) {
      const report = await runScopedPass({
        ...common,
        kind,
        clusters: new Set([name]),
        record: (x) => records.get(x),
        last,
      });
      if ('doubt' in report) throw new Error(`scoped pass declined: ${report.doubt}`);
      last = report.result;
      return report;
    },
  };
}
