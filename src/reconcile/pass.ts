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
import { type DesiredRoutes, memoizedDesiredRoutes } from './desired.js';
import type { PassResult } from './status.js';

const PLAN_LOG_LINES = 50;

/** The desired objects for the accepted clusters and the topology as it is now. Pure. */
export function desiredConfig(
  records: readonly ClusterRecord[],
  topology: Topology,
  render: RenderOptions,
): { desired: DesiredRoutes; config: DesiredConfig } {
  const desired = memoizedDesiredRoutes(records, topology);
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

/**
 * How a pass failed: all the Reconciler needs to decide whether and when to try again. The provider
 * contract's classes: `TerminalError` is not retried, `ConcurrentChangeError` only asks to read again, and
 * anything else is transient.
 */
export type FailureKind = 'terminal' | 'conflict' | 'transient';

export function failureKind(err: unknown): FailureKind {
  if (err instanceof TerminalError) return 'terminal';
  return err instanceof ConcurrentChangeError ? 'conflict' : 'transient';
}

export interface PassInputs {
  records: readonly ClusterRecord[];
  topology: Topology;
  provider: OwnedProvider;
  render: RenderOptions;
  /**
   * Times a pass reads, plans and applies again at once when HAProxy changed meanwhile
   * (`ConcurrentChangeError`). No other error is tried again within a pass: the Reconciler decides that.
   */
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
  /** Why the pass failed, when it did. */
  failure?: FailureKind;
}

/**
 * One reconcile pass, separate from its scheduling (external-dns's RunOnce): plan the desired objects
 * against what HAProxy has and apply the plan, once. A concurrent change is read and planned again at once
 * (up to `retries` times); any other error ends the pass, and its kind goes back to the caller. Never throws.
 */
export async function runPass(i: PassInputs): Promise<PassReport> {
  const { logger, signal } = i;
  const seen = new Map(i.records.map((r) => [r.name, r.updatedAt]));
  const endRender = phase(i.metrics, 'render');
  const { desired, config } = desiredConfig(i.records, i.topology, i.render);
  endRender();
  const out: AttemptOutput = { conflicted: new Map(), touched: new Set() };
  const { conflicted, touched } = out;
  try {
    const changed = await pRetry(() => attempt(i, config, out), {
      retries: i.retries,
      // A concurrent change only means "read again": nothing to wait for.
      minTimeout: 0,
      signal,
      shouldRetry: ({ error }) => failureKind(error) === 'conflict',
      onFailedAttempt: ({ error, attemptNumber, retriesLeft }) => {
        if (failureKind(error) === 'conflict' && retriesLeft > 0)
          logger.info({ err: errorText(error), attemptNumber }, 'HAProxy changed meanwhile; reading again');
      },
    });
    return { result: { seen, ok: true, desired, conflicted }, changed, touched };
  } catch (err) {
    const error = errorText(err);
    const failure = failureKind(err);
    logger.error({ err: error, failure }, 'reconcile failed');
    return { result: { seen, ok: false, error, desired, conflicted }, changed: false, touched, failure };
  }
}

interface AttemptOutput {
  /** Clusters whose backend a foreign object holds, from the latest plan. */
  conflicted: Map<string, string>;
  /** Clusters a plan that was sent changes. */
  touched: Set<string>;
}

const phase = (metrics: Metrics, name: 'render' | 'read' | 'plan' | 'apply') =>
  metrics.reconcilePhaseDuration.startTimer({ phase: name });

/** Reads, plans and applies once; resolves whether a plan was applied, throws what the provider threw. */
async function attempt(i: PassInputs, config: DesiredConfig, out: AttemptOutput): Promise<boolean> {
  const { metrics, logger, provider, signal } = i;
  const endRead = phase(metrics, 'read');
  const raw = await provider.readState(signal);
  endRead();
  const endPlan = phase(metrics, 'plan');
  const p = plan(config, provider.registry.interpret(raw));
  endPlan();
  const clusterOf = new Map(config.backends.map((b) => [b.name, b.cluster]));
  const { blocking, byCluster, others } = sortConflicts(p.conflicts, config.backends);
  out.conflicted.clear();
  // A foreign frontend under our name blocks every route: nothing may be applied, nothing is routed.
  if (blocking) throw new TerminalError(`${blocking.kind}: ${blocking.detail}`);
  for (const [cluster, detail] of byCluster) out.conflicted.set(cluster, detail);
  for (const c of others) logger.warn({ conflict: c.kind, object: c.name }, c.detail);
  if (p.operations.length === 0) return false;
  for (const cluster of clustersTouched(p, clusterOf)) out.touched.add(cluster);
  logPlan(logger, p);
  const endApply = phase(metrics, 'apply');
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
  return true;
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
