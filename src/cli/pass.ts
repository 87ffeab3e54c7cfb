import type { Logger } from 'pino';
import { type Config, ConfigError, loadConfig, renderOptionsOf } from '../config/env.js';
import { createMetrics, type Metrics } from '../metrics/metrics.js';
import type { ClusterRecord } from '../model/cluster.js';
import { errorText } from '../model/errors.js';
import { formatPlan } from '../plan/format.js';
import type { Plan } from '../plan/plan.js';
import type { Provider, ProviderInfo } from '../providers/provider.js';
import { sortConflicts } from '../reconcile/conflicts.js';
import { desiredConfig, planAgainst, runPass } from '../reconcile/pass.js';
import { routeBackends } from '../reconcile/routing.js';
import { type ClusterStatus, clusterStatuses, passResult } from '../reconcile/status.js';
import type { OwnedProvider } from '../registry/owned-provider.js';
import { ClusterStore } from '../store/cluster-store.js';
import type { Topology } from '../topology/topology.js';
import { checkClusterSet } from '../webhook/clusters.js';
import { ClusterSetBody } from '../webhook/schemas.js';
import { createConfiguredProvider, createLogger, createTopology } from '../wiring.js';
import { clusterTable, networksSection, type Output, routeSection, routesOf } from './output.js';
import { readJson } from './render.js';

/** What tests (and embedders) may put in place of what the configuration names. */
export interface CliDeps {
  provider?: Provider;
  logger?: Logger;
}

/** `plan` exits 2 when a pass would change something, like `terraform plan -detailed-exitcode`. */
export const EXIT_CHANGES = 2;

interface Session {
  config: Config;
  records: ClusterRecord[];
  source: string;
  topology: Topology;
  provider: OwnedProvider;
  info: ProviderInfo;
  logger: Logger;
  metrics: Metrics;
  signal: AbortSignal;
  close(): Promise<void>;
}

/**
 * `plan [file]`: what one reconcile pass would change in the HAProxy the configuration points at, for the
 * clusters in `file` (the full-set format of `PUT /v1/clusters`) or, without one, in the state file.
 * Changes nothing. Exit 0: nothing to change; 2: changes; 1: error.
 */
export async function planCommand(
  file: string | undefined,
  opts: { json: boolean },
  env: NodeJS.ProcessEnv,
  io: Output,
  deps: CliDeps = {},
): Promise<number> {
  const s = await open('plan', file, env, io, deps);
  if (typeof s === 'number') return s;
  try {
    const { desired, config } = desiredConfig(s.records, s.topology, renderOptionsOf(s.config.haproxy));
    let p: Plan;
    try {
      p = await planAgainst(config, s.provider, s.signal, { fresh: true });
    } catch (err) {
      io.err(`plan: cannot read HAProxy's objects (${s.info.endpoint}): ${errorText(err)}`);
      return 1;
    }
    const { blocking } = sortConflicts(p.conflicts);
    // The state every cluster would be in after this plan is applied.
    const after = passResult(desired, {
      seen: new Map(s.records.map((r) => [r.name, r.updatedAt])),
      ok: true,
      backends: routeBackends(config, p),
    });
    const clusters = clusterStatuses(s.records, after, new Map(), s.config.publicPort);
    const text = formatPlan(p);
    if (opts.json) {
      io.out(
        JSON.stringify(
          {
            haproxy: s.info,
            source: s.source,
            changes: p.operations.length,
            operations: p.operations,
            conflicts: p.conflicts,
            text,
            clusters: clusters.map(withoutLastApplied),
          },
          null,
          2,
        ),
      );
    } else {
      io.out(
        `${s.info.version} at ${s.info.endpoint} (provider ${s.provider.name}); clusters from ${s.source}`,
      );
      io.out('');
      io.out(text);
      io.out('');
      io.out(p.operations.length === 0 ? 'no changes' : `${p.operations.length} changes`);
      if (clusters.length > 0) {
        io.out('');
        io.out('after this plan:');
        const lines = [
          ...clusterTable(clusters, false),
          ...networksSection(clusters),
          ...routeSection(routesOf(clusters)),
        ];
        for (const line of lines) io.out(line);
      }
    }
    if (blocking) {
      io.err(`plan: a pass would fail: ${blocking.kind}: ${blocking.detail}`);
      return 1;
    }
    return p.operations.length === 0 ? 0 : EXIT_CHANGES;
  } finally {
    await s.close();
  }
}

/**
 * `apply [file]`: one reconcile pass now, without the service (with its retries); the state file is read,
 * never written. Exit 0 when the pass succeeded, 1 with the reason when it failed.
 */
export async function applyCommand(
  file: string | undefined,
  env: NodeJS.ProcessEnv,
  io: Output,
  deps: CliDeps = {},
): Promise<number> {
  const s = await open('apply', file, env, io, deps);
  if (typeof s === 'number') return s;
  try {
    const report = await runPass({
      records: s.records,
      topology: s.topology,
      provider: s.provider,
      render: renderOptionsOf(s.config.haproxy),
      retries: s.config.reconcile.retries,
      signal: s.signal,
      logger: s.logger,
      metrics: s.metrics,
    });
    io.out(
      `${s.info.version} at ${s.info.endpoint} (provider ${s.provider.name}); clusters from ${s.source}`,
    );
    io.out('');
    // Seeing the plan that was applied (or tried) is the point of running this by hand.
    const tried = report.attempted;
    io.out(tried ? formatPlan(tried) : 'no changes');
    const now = Date.now();
    const appliedAt = new Map(report.result.ok ? s.records.map((r) => [r.name, now]) : []);
    const clusters = clusterStatuses(s.records, report.result, appliedAt, s.config.publicPort);
    if (clusters.length > 0) {
      io.out('');
      const lines = [
        ...clusterTable(clusters),
        ...networksSection(clusters),
        ...routeSection(routesOf(clusters)),
      ];
      for (const line of lines) io.out(line);
    }
    if (!report.result.ok) {
      io.err(
        `apply: failed${tried ? ' (what ran at runtime before the failure stays; the next pass plans from it)' : ''}: ${report.result.error ?? 'reconcile failed'}`,
      );
      return 1;
    }
    io.out('');
    io.out(tried ? `applied ${tried.operations.length} changes` : 'nothing to apply');
    return 0;
  } finally {
    await s.close();
  }
}

function withoutLastApplied({ last_applied_at: _, ...c }: ClusterStatus) {
  return c;
}

/** Configuration, clusters, topology and provider for one pass; a number is the exit code of a failure. */
async function open(
  command: string,
  file: string | undefined,
  env: NodeJS.ProcessEnv,
  io: Output,
  deps: CliDeps,
): Promise<Session | number> {
  let config: Config;
  try {
    // A pass run by hand answers no webhook: its secret is not needed (nor read) here.
    const unsigned =
      env.KUBEBYON_WEBHOOK_SECRET || env.KUBEBYON_WEBHOOK_SECRET_FILE
        ? {}
        : { KUBEBYON_WEBHOOK_SECRET: 'not-used-by-the-command-line' };
    config = loadConfig({ ...env, ...unsigned });
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    io.err(`${command}: ${err.message}`);
    return 1;
  }
  const records = file === undefined ? await fromStateFile(config.stateFile, io) : await fromFile(file, io);
  if (records === undefined) return 1;
  // Logs go to standard error, so that standard output holds only the result; quiet unless asked.
  const logger =
    deps.logger ?? createLogger({ logLevel: env.KUBEBYON_LOG_LEVEL ? config.logLevel : 'warn' }, 2);
  const metrics = createMetrics();
  const controller = new AbortController();
  const interrupt = () => controller.abort(new Error('interrupted'));
  process.once('SIGINT', interrupt);
  process.once('SIGTERM', interrupt);
  const cleanups: Array<() => Promise<void> | void> = [
    () => {
      process.off('SIGINT', interrupt);
      process.off('SIGTERM', interrupt);
    },
  ];
  const close = async () => {
    for (const c of cleanups.reverse()) await c();
  };
  try {
    const wiring = { logger, metrics, env };
    // A pass is run once: a change meanwhile is for the next one.
    const { topology, kube } = await createTopology(config, () => {}, wiring);
    if (kube) {
      cleanups.push(() => kube.stop());
      await kube.start();
      // An unread topology means "unknown", not "no nodes": planning from it would remove every server.
      if (!kube.synced()) {
        io.err(
          `${command}: cannot read nodes and services from Kubernetes: ${JSON.stringify(kube.health())}`,
        );
        await close();
        return 1;
      }
    }
    const provider = await createConfiguredProvider(config, {
      ...wiring,
      keepsFiles: false,
      ...(deps.provider ? { given: deps.provider } : {}),
    });
    if (!deps.provider) cleanups.push(() => provider.close());
    let info: ProviderInfo;
    try {
      info = await provider.ping(AbortSignal.any([controller.signal, AbortSignal.timeout(10_000)]));
    } catch (err) {
      io.err(`${command}: HAProxy does not answer (provider ${provider.name}): ${errorText(err)}`);
      await close();
      return 1;
    }
    const source = file ?? `the state file ${config.stateFile}`;
    return {
      config,
      records,
      source,
      topology,
      provider,
      info,
      logger,
      metrics,
      signal: controller.signal,
      close,
    };
  } catch (err) {
    io.err(`${command}: ${errorText(err)}`);
    await close();
    return 1;
  }
}

/** Clusters of a full-set file, checked exactly like `PUT /v1/clusters`; a bad item refuses the file. */
async function fromFile(file: string, io: Output): Promise<ClusterRecord[] | undefined> {
  const json = await readJson(file, io);
  if (json === undefined) return undefined;
  const parsed = ClusterSetBody.safeParse(json);
  if (!parsed.success) {
    for (const i of parsed.error.issues) {
      const path = i.code === 'unrecognized_keys' ? [...i.path, ...i.keys] : i.path;
      io.err(`${file}: ${path.join('.')}: ${i.message}`);
    }
    return undefined;
  }
  const checked = checkClusterSet(parsed.data);
  if (!checked.ok) {
    const e = checked.error;
    io.err(`${file}: ${e.field}: ${e.reason}: ${e.detail}`);
    return undefined;
  }
  // Claimed at one instant, as one full-set PUT to an empty service: a contested host goes to the smaller name.
  return checked.inputs.map((input) => ({ ...input, claimedAt: 0, updatedAt: 0 }));
}

async function fromStateFile(path: string, io: Output): Promise<ClusterRecord[] | undefined> {
  try {
    return await ClusterStore.read(path);
  } catch (err) {
    // A mistyped path must not read as "no clusters": applying that would remove every route.
    io.err(
      (err as NodeJS.ErrnoException).code === 'ENOENT'
        ? `no state file at ${path} (KUBEBYON_STATE_FILE): give a clusters file, or point it at the service's state`
        : errorText(err),
    );
    return undefined;
  }
}
