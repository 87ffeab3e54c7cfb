import pRetry from 'p-retry';
import type { Logger } from 'pino';
import type { DesiredConfig } from '../haproxy/model.js';
import { type RenderOptions, renderDesired } from '../haproxy/render.js';
import type { Metrics } from '../metrics/metrics.js';
import type { ClusterRecord } from '../model/cluster.js';
import { formatPlan } from '../plan/format.js';
import { type Plan, plan } from '../plan/plan.js';
import { ConcurrentChangeError, errorText, ReloadFailedError, TerminalError } from '../providers/provider.js';
import type { OwnedProvider } from '../registry/owned-provider.js';
import type { Topology } from '../topology/topology.js';
import { sortConflicts } from './conflicts.js';
import { type DesiredRoutes, desiredRoutes } from './desired.js';
import type { PassResult } from './status.js';

const PLAN_LOG_LINES = 50;

/** The desired objects for the accepted clusters and the topology as it is now. Pure. */
export function desiredConfig(
  records: readonly ClusterRecord[],
  topology: Topology,
  render: RenderOptions,
): { desired: DesiredRoutes; config: DesiredConfig } {
  const desired = desiredRoutes(records, topology);
  return { desired, config: renderDesired(desired.routes, render) };
}

/** Reads HAProxy once and plans against it: what a pass would apply now. */
export async function planAgainst(
  config: DesiredConfig,
  provider: OwnedProvider,
  signal: AbortSignal,
): Promise<Plan> {
  return plan(config, provider.registry.interpret(await provider.readState(signal)));
}

export interface PassInputs {
  records: readonly ClusterRecord[];
  topology: Topology;
  provider: OwnedProvider;
  render: RenderOptions;
  /** Attempts after the first: a concurrent change is re-read and re-planned, transient errors backed off. */
  retries: number;
  signal: AbortSignal;
  logger: Logger;
  metrics: Metrics;
}

export interface PassReport {
  result: PassResult;
  /** Whether a plan was applied. */
  changed: boolean;
  /** Clusters whose objects the applied plan changed. */
  touched: Set<string>;
}

/**
 * One reconcile pass, separate from its scheduling (external-dns's RunOnce): plan the desired objects
 * against what HAProxy has, apply the plan, and retry what retrying can fix. Never throws.
 */
export async function runPass(i: PassInputs): Promise<PassReport> {
  const { metrics, logger, provider, signal } = i;
  const seen = new Map(i.records.map((r) => [r.name, r.updatedAt]));
  const phase = (name: 'render' | 'read' | 'plan' | 'apply') =>
    metrics.reconcilePhaseDuration.startTimer({ phase: name });
  const endRender = phase('render');
  const { desired, config } = desiredConfig(i.records, i.topology, i.render);
  endRender();
  const clusterOf = new Map(config.backends.map((b) => [b.name, b.cluster]));
  const conflicted = new Map<string, string>();
  const touched = new Set<string>();
  let changed = false;
  try {
    await pRetry(
      async () => {
        const endRead = phase('read');
        const raw = await provider.readState(signal);
        endRead();
        const endPlan = phase('plan');
        const p = plan(config, provider.registry.interpret(raw));
        endPlan();
        const { blocking, byCluster, others } = sortConflicts(p.conflicts, config.backends);
        conflicted.clear();
        if (blocking) throw new TerminalError(`${blocking.kind}: ${blocking.detail}`);
        for (const [cluster, detail] of byCluster) conflicted.set(cluster, detail);
        for (const c of others) logger.warn({ conflict: c.kind, object: c.name }, c.detail);
        if (p.operations.length === 0) return;
        for (const cluster of clustersTouched(p, clusterOf)) touched.add(cluster);
        logPlan(logger, p);
        const endApply = phase('apply');
        try {
          const report = await provider.apply(p, raw, signal);
          metrics.transactions.inc({ result: 'committed' });
          if (report.reload === 'succeeded') metrics.reloads.inc({ result: 'succeeded' });
        } catch (err) {
          metrics.transactions.inc({ result: err instanceof ConcurrentChangeError ? 'conflict' : 'failed' });
          if (err instanceof ReloadFailedError) metrics.reloads.inc({ result: 'failed' });
          throw err;
        } finally {
          endApply();
        }
        changed = true;
      },
      {
        retries: i.retries,
        minTimeout: 100,
        maxTimeout: 5_000,
        signal,
        shouldRetry: ({ error }) => !(error instanceof TerminalError),
        onFailedAttempt: ({ error, attemptNumber, retriesLeft }) =>
          logger.warn({ err: errorText(error), attemptNumber, retriesLeft }, 'reconcile attempt failed'),
      },
    );
    return { result: { seen, ok: true, desired, conflicted }, changed, touched };
  } catch (err) {
    const error = errorText(err);
    logger.error({ err: error, terminal: err instanceof TerminalError }, 'reconcile failed');
    return { result: { seen, ok: false, error, desired, conflicted }, changed, touched };
  }
}

// A cold sync of thousands of routes is tens of thousands of lines: log the head only.
function logPlan(logger: Logger, p: Plan): void {
  const lines = formatPlan(p).split('\n');
  logger.info(
    {
      operations: p.operations.length,
      plan: lines.slice(0, PLAN_LOG_LINES).join('\n'),
      truncated: lines.length > PLAN_LOG_LINES,
    },
    'applying plan',
  );
}

/** Clusters whose backend, servers or switching rule a plan changes. */
function clustersTouched(p: Plan, clusterOf: ReadonlyMap<string, string>): Set<string> {
  const names = new Set<string>();
  for (const op of p.operations) {
    if (op.kind === 'create_backend' || op.kind === 'update_backend') names.add(op.backend.name);
    if (op.kind === 'create_server' || op.kind === 'update_server' || op.kind === 'delete_server')
      names.add(op.backend);
    if (op.kind === 'set_switching_rules') for (const r of [...op.added, ...op.removed]) names.add(r.backend);
  }
  const clusters = new Set<string>();
  for (const name of names) {
    const cluster = clusterOf.get(name);
    if (cluster !== undefined) clusters.add(cluster);
  }
  return clusters;
}
