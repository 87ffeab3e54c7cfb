import pRetry from 'p-retry';
import type { Logger } from 'pino';
import type { DesiredConfig } from '../haproxy/model.js';
import { type RenderOptions, renderDesired } from '../haproxy/render.js';
import type { Metrics } from '../metrics/metrics.js';
import type { ClusterRecord } from '../model/cluster.js';
import {
  ConcurrentChangeError,
  errorText,
  FencedError,
  ReloadFailedError,
  TerminalError,
} from '../model/errors.js';
import { formatPlan } from '../plan/format.js';
import type { PoolReport } from '../plan/operations.js';
import { type Plan, plan } from '../plan/plan.js';
import type { Reading } from '../plan/reading.js';
import type { RoutingIndexCache } from '../plan/routing-index.js';
import type { OwnedProvider, ReadOptions } from '../registry/owned-provider.js';
import type { Topology } from '../topology/topology.js';
import { sortConflicts } from './conflicts.js';
import { type DesiredRoutes, memoizedDesiredRoutes } from './desired.js';
import { type PassKind, type RouteBackend, reloadReason, routeBackends } from './routing.js';
import { type PassResult, passResult } from './status.js';

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

/** Reads HAProxy once and plans against it: what a pass would apply now. Writes nothing (`settle: false`). */
export async function planAgainst(
  config: DesiredConfig,
  provider: OwnedProvider,
  signal: AbortSignal,
  read: ReadOptions = {},
): Promise<Plan> {
  return plan(config, (await provider.read(signal, { ...read, settle: false })).state);
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
  /** How to read, whether to grow the slot pool, how a reload counts; default: a fresh read, growing ahead. */
  kind?: PassKind;
  /**
   * Map routing: the index scoped passes plan from, built here from the state this pass read, so that the
   * next scoped pass only advances it by what this one applied.
   */
  indexes?: RoutingIndexCache;
}

export interface PassReport {
  result: PassResult;
  /** Whether a plan was applied. */
  changed: boolean;
  /** Clusters whose objects the applied plan changed. */
  touched: Set<string>;
  /** Why the pass failed, when it did. */
  failure?: FailureKind;
  /** Map routing: the slot pool as the last plan left it. */
  pool?: PoolReport;
  /** The last non-empty plan sent to the provider, whether it was applied or not. */
  attempted?: Plan;
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
  const out: AttemptOutput = { touched: new Set(), backends: new Map() };
  const { touched } = out;
  try {
    const changed = await pRetry((n) => attempt(i, config, out, n), {
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
    const result = passResult(desired, { seen, ok: true, backends: out.backends });
    return {
      result,
      changed,
      touched,
      ...(out.pool ? { pool: out.pool } : {}),
      ...(out.attempted ? { attempted: out.attempted } : {}),
    };
  } catch (err) {
    const error = errorText(err);
    const failure = failureKind(err);
    logger.error({ err: error, failure }, 'reconcile failed');
    const result = passResult(desired, { seen, ok: false, error });
    return {
      result,
      changed: false,
      touched,
      failure,
      ...(out.attempted ? { attempted: out.attempted } : {}),
    };
  }
}

interface AttemptOutput {
  /** Clusters a plan that was sent changes. */
  touched: Set<string>;
  /** Each routed cluster's backend, from the latest plan. */
  backends: Map<string, RouteBackend>;
  pool?: PoolReport;
  attempted?: Plan;
}

const DEFAULT_KIND: PassKind = { fresh: true, grow: 'ahead', repair: false };

export const phase = (metrics: Metrics, name: 'render' | 'read' | 'plan' | 'apply') =>
  metrics.reconcilePhaseDuration.startTimer({ phase: name });

/** Reads, plans and applies once; resolves whether a plan was applied, throws what the provider threw. */
async function attempt(
  i: PassInputs,
  config: DesiredConfig,
  out: AttemptOutput,
  attemptNumber: number,
): Promise<boolean> {
  const { metrics, logger, provider, signal } = i;
  const kind = i.kind ?? DEFAULT_KIND;
  const endRead = phase(metrics, 'read');
  // HAProxy changed under the last attempt: what the provider remembers of it is not to be trusted.
  const reading = await provider.read(signal, { fresh: kind.fresh || attemptNumber > 1 });
  endRead();
  const endPlan = phase(metrics, 'plan');
  const p = plan(config, reading.state, { grow: kind.grow });
  i.indexes?.for(reading, config);
  endPlan();
  out.backends = routeBackends(config, p);
  if (p.pool) out.pool = p.pool;
  else delete out.pool;
  // The slots this plan leaves serving each cluster.
  const clusterOf = new Map<string, string>();
  for (const [cluster, { backend }] of out.backends) clusterOf.set(backend, cluster);
  const { blocking, others } = sortConflicts(p.conflicts);
  // A foreign frontend under our name blocks every route: nothing may be applied, nothing is routed.
  if (blocking) throw new TerminalError(`${blocking.kind}: ${blocking.detail}`);
  for (const c of others) logger.warn({ conflict: c.kind, object: c.name }, c.detail);
  if (p.operations.length === 0) return false;
  for (const cluster of clustersTouched(p, clusterOf)) out.touched.add(cluster);
  out.attempted = p;
  await applyPlan(i, p, reading, kind);
  // The routing index follows this plan's operations now, in the pass that made them, not in the next
  // webhook's scoped pass (lists put on 5000 clusters at once: 85 000 operations, 30 ms).
  const next = provider.keptReading();
  if (next) i.indexes?.for(next, config);
  return true;
}

/** Applies a non-empty plan to the state it was made from, with its log line and metrics; throws what the provider threw. */
export async function applyPlan(
  i: Pick<PassInputs, 'provider' | 'signal' | 'logger' | 'metrics'>,
  p: Plan,
  reading: Reading,
  kind: PassKind,
): Promise<void> {
  const { metrics } = i;
  logPlan(i.logger, p);
  const endApply = phase(metrics, 'apply');
  // Said when the apply ends too: with replicas, the log shows each one's applies never overlap.
  let result = 'failed';
  try {
    const report = await i.provider.apply(p, reading, i.signal);
    metrics.transactions.inc({ result: 'committed' });
    result = 'committed';
    if (report.reload === 'succeeded')
      metrics.reloads.inc({ result: 'succeeded', reason: reloadReason(p, kind.repair) });
  } catch (err) {
    if (err instanceof FencedError) {
      result = 'fenced';
      throw err;
    }
    metrics.transactions.inc({ result: err instanceof ConcurrentChangeError ? 'conflict' : 'failed' });
    if (err instanceof ReloadFailedError)
      metrics.reloads.inc({ result: 'failed', reason: reloadReason(p, kind.repair) });
    throw err;
  } finally {
    endApply();
    i.logger.info({ operations: p.operations.length, result }, 'apply ended');
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

/** Clusters whose backend, servers, switching rule or map entry a plan changes. */
function clustersTouched(p: Plan, clusterOf: ReadonlyMap<string, string>): Set<string> {
  const names = new Set<string>();
  for (const op of p.operations) {
    if (op.kind === 'create_backend') names.add(op.backend.name);
    if (op.kind === 'create_server' || op.kind === 'update_server' || op.kind === 'delete_server')
      names.add(op.backend);
    if (op.kind === 'set_switching_rules') for (const r of [...op.added, ...op.removed]) names.add(r.backend);
    if (op.kind === 'set_map_entry') names.add(op.backend);
  }
  const clusters = new Set<string>();
  for (const name of names) {
    const cluster = clusterOf.get(name);
    if (cluster !== undefined) clusters.add(cluster);
  }
  return clusters;
}
