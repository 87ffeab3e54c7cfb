import type { Logger } from 'pino';
import { errorText } from '../model/errors.js';
import type { Plan } from '../plan/plan.js';
import type { Loop, PassOutcome } from '../reconcile/reconciler-options.js';
import type { RouteBackend } from '../reconcile/routing.js';
import type { ClusterStatus } from '../reconcile/status.js';
import type { DesiredStore, PublishedStatus } from '../store/desired-store.js';
import { combineOutcomes, combineStatuses, type FleetStatus, fromPublished, toPublished } from './combine.js';
import { type InstanceTarget, type Lane, LaneSet } from './lanes.js';
import { StatusPublisher } from './publisher.js';

export type { InstanceTarget, Lane };

/** The desired state as the fleet reads it; a shared store also carries what the leader published. */
export type FleetStore = Pick<DesiredStore, 'list' | 'get'> & {
  published?(name: string): PublishedStatus | undefined;
  publish?(name: string, status: PublishedStatus): void;
};

export interface FleetOptions<T extends InstanceTarget> {
  store: FleetStore;
  /** Makes (and starts) an instance's lane; `passed` hears which clusters each of its passes judged. */
  makeLane(target: T, passed: (clusters: ReadonlySet<string> | 'all') => void): Promise<Lane>;
  logger: Logger;
  /** One instance given by the provider's own settings: its loop's answers are the fleet's, unchanged. */
  single: boolean;
  /** How long a replica that does not lead waits for the leader to publish a change (`?wait=true`). */
  waitTimeoutMs: number;
}

/** `GET /v1/plan` on a replica that does not lead: only the leader reads HAProxy. */
export class NotLeadingError extends Error {
  override readonly name = 'NotLeadingError';
}

const FOLLOW_POLL_MS = 100;

type Check = { ok: boolean; detail?: string };

/** Why an instance whose lane is being made has nothing yet. */
const STARTING = 'starting: its HAProxy has not been reached yet';

/**
 * Every HAProxy instance, each read, planned and applied by its own `Reconciler` (a lane), so that a slow or
 * dead instance holds no other back. Lanes exist only while this replica leads (always, without leader
 * election); a replica that does not lead answers from what the leader published in the shared store.
 * (Just over 300 lines: the `Loop` contract's one class, leading and following side by side.)
 */
export class Fleet<T extends InstanceTarget = InstanceTarget> implements Loop {
  private targets: T[] = [];
  private readonly lanes: LaneSet<T>;
  private leading = false;
  /** Whether this replica hands its statuses to the shared store (the Lease's holder). */
  private publishing = false;
  private stopped = false;
  private readonly publisher: StatusPublisher | undefined;

  constructor(private readonly o: FleetOptions<T>) {
    const { store } = o;
    this.lanes = new LaneSet(
      (target) =>
        o.makeLane(target, (clusters) => {
          if (this.publishing) this.publisher?.mark(clusters);
        }),
      o.logger,
    );
    this.publisher = store.publish
      ? new StatusPublisher(
          (name) => this.publishable(name),
          store.list.bind(store),
          store.publish.bind(store),
        )
      : undefined;
  }

  get isLeading(): boolean {
    return this.leading;
  }

  /** Whether this replica publishes statuses and sweeps tombstones (it holds the Lease, or there is none). */
  get isPublishing(): boolean {
    return this.publishing;
  }

  /** The instances to drive (a list, or the pods discovery found). */
  setTargets(targets: T[]): Promise<void> {
    this.targets = targets;
    return this.sync();
  }

  /**
   * This replica leads: a lane per instance, each starting with a fresh read of its HAProxy. With `publish`
   * false (each replica applies to an HAProxy of its own), the Lease decides publishing: `setPublishing`.
   */
  lead(options: { publish?: boolean } = {}): Promise<void> {
    this.leading = true;
    this.publishing = options.publish ?? true;
    return this.sync();
  }

  /** Starts or stops publishing while the lanes keep applying; a new publisher publishes every status. */
  setPublishing(on: boolean): void {
    this.publishing = on && !this.stopped;
    if (this.publishing) this.publisher?.mark('all');
  }

  /**
   * This replica no longer leads: every lane stops at once (a pass in flight is aborted), and writes nothing
   * more to HAProxy's files (the new leader does).
   */
  standby(): Promise<void> {
    this.leading = false;
    this.publishing = false;
    return this.sync(0, false);
  }

  /** Publishes what the passes so far judged (while the lanes still answer), then stops the lanes. */
  async stop(graceMs: number): Promise<void> {
    this.stopped = true;
    await this.publisher?.flush();
    this.publisher?.stop();
    this.leading = false;
    this.publishing = false;
    await this.sync(graceMs);
  }

  request(reason: string, changed?: { clusters: readonly string[] }): Promise<PassOutcome> {
    if (!this.leading) return this.follow(changed?.clusters);
    return this.lanes.settled().then(async () => {
      const all = this.lanes.all();
      if (all.length === 0) return { ok: false, changed: false, error: 'no HAProxy instance to apply to' };
      // An instance whose lane is still being made gets the change from its first pass.
      const per = await Promise.all(
        all.map(async ([instance, lane]) => ({
          instance,
          outcome: lane
            ? await lane.loop.request(reason, changed)
            : { ok: false, changed: false, error: STARTING },
        })),
      );
      return combineOutcomes(per);
    });
  }

  /** Events of the service's own (topology, another replica's write): a pass if this replica leads. */
  nudge(reason: string, changed?: { clusters: readonly string[] }): void {
    if (this.leading) void this.request(reason, changed);
  }

  status(name: string): FleetStatus | undefined {
    const record = this.o.store.get(name);
    if (!record) return undefined;
    if (!this.leading) return fromPublished(record, this.o.store.published?.(name));
    const all = this.lanes.all();
    const only = all.length === 1 ? all[0]?.[1] : undefined;
    if (this.o.single && only) return only.loop.status(name);
    if (all.length === 0) return { ...fromPublished(record, undefined), reason: 'no HAProxy instance' };
    const pending = { ...fromPublished(record, undefined), reason: STARTING };
    return combineStatuses(
      all.map(([instance, lane]) => ({ instance, status: lane ? lane.loop.status(name) : pending })),
    );
  }

  statuses(): ClusterStatus[] {
    const lanes = this.lanes.entries();
    if (this.leading && this.o.single && lanes.length === 1) return lanes[0]?.[1].loop.statuses() ?? [];
    const records = this.o.store.list();
    if (!this.leading || lanes.length === 0 || this.lanes.startingNames().length > 0)
      return records.flatMap((r) => this.status(r.name) ?? []);
    // Each lane's statuses once, then one combination per cluster (not one lookup per lane and cluster).
    const per = lanes.map(([instance, lane]) => ({
      instance,
      byName: new Map(lane.loop.statuses().map((s) => [s.name, s])),
    }));
    return records.flatMap(
      (r) => combineStatuses(per.map((p) => ({ instance: p.instance, status: p.byName.get(r.name) }))) ?? [],
    );
  }

  /** Each lane's refusal counts (`Reconciler.refusals`), by instance; none while standing by. */
  async refusals(
    signal: AbortSignal,
  ): Promise<Array<{ instance: string; cluster: string; host: string; count: number }>> {
    if (!this.leading) return [];
    const per = await Promise.all(
      this.lanes
        .entries()
        .map(async ([instance, lane]) =>
          (await lane.loop.refusals(signal).catch(() => [])).map((r) => ({ instance, ...r })),
        ),
    );
    return per.flat();
  }

  async preview(): Promise<{ plan: Plan; text: string; routes: Map<string, RouteBackend> }> {
    if (!this.leading) throw new NotLeadingError('this replica does not lead: ask the leader for its plan');
    await this.lanes.settled();
    const lanes = this.lanes.entries();
    const first = lanes[0];
    if (!first) throw new NotLeadingError('no HAProxy instance to plan against');
    if (lanes.length === 1) return first[1].loop.preview();
    // Instances can differ (one was down): each one's plan, the first one's routes.
    const previews = await Promise.all(
      lanes.map(async ([name, lane]) => ({ name, p: await lane.loop.preview() })),
    );
    const head = previews[0] as (typeof previews)[number];
    return {
      plan: {
        ...head.p.plan,
        operations: previews.flatMap((x) => x.p.plan.operations),
        conflicts: previews.flatMap((x) => x.p.plan.conflicts),
      },
      text: previews.map((x) => `# haproxy ${x.name}\n${x.p.text}`).join('\n'),
      routes: head.p.routes,
    };
  }

  /**
   * For readiness: with one instance, its HAProxy (`haproxy`) and its loop (`reconcile`) as before; with
   * several, ready while any instance is reachable and reconciled (one down must not take the webhook
   * away from the others), the ones behind named in the detail. Nothing on a replica that does not lead.
   */
  async health(pingTimeoutMs: number): Promise<Record<string, Check>> {
    if (!this.leading) return {};
    await this.lanes.settled();
    const starting = this.lanes.startingNames().map((name) => ({
      name,
      haproxy: { ok: false, detail: STARTING },
      reconcile: { ok: false, detail: STARTING },
    }));
    const running = await Promise.all(
      this.lanes.entries().map(async ([name, lane]) => {
        const haproxy: Check = await lane.ping(AbortSignal.timeout(pingTimeoutMs)).then(
          () => ({ ok: true }),
          (err: unknown) => ({ ok: false, detail: errorText(err) }),
        );
        const lastError = lane.loop.lastError;
        const reconcile: Check = !lane.loop.ready
          ? { ok: false, detail: lastError ?? 'no reconcile has succeeded yet' }
          : lastError
            ? { ok: false, detail: lastError }
            : { ok: true };
        return { name, haproxy, reconcile };
      }),
    );
    const per = [...running, ...starting];
    const only = per[0];
    if (this.o.single && only && per.length === 1)
      return { haproxy: only.haproxy, reconcile: only.reconcile };
    if (per.length === 0) return { haproxy: { ok: false, detail: 'no HAProxy instance' } };
    const behind = per.flatMap((p) => {
      const problem = !p.haproxy.ok ? p.haproxy.detail : !p.reconcile.ok ? p.reconcile.detail : undefined;
      return problem === undefined ? [] : [`${p.name}: ${problem}`];
    });
    const detail = behind.length > 0 ? { detail: behind.join('; ') } : {};
    return { haproxy: { ok: behind.length < per.length, ...detail } };
  }

  /** Each instance's HAProxy as a ping finds it now (the start log line). */
  reach(
    timeoutMs: number,
  ): Promise<Array<{ name: string; version?: string; endpoint?: string; unreachable?: string }>> {
    return Promise.all(
      this.lanes.entries().map(([name, lane]) =>
        lane.ping(AbortSignal.timeout(timeoutMs)).then(
          (info) => ({ name, version: info.version, endpoint: info.endpoint }),
          (err: unknown) => ({ name, unreachable: errorText(err) }),
        ),
      ),
    );
  }

  private publishable(name: string): PublishedStatus | undefined {
    const record = this.o.store.get(name);
    const status = this.leading && this.publishing ? this.status(name) : undefined;
    if (!record || !status || status.state === 'pending') return undefined;
    // One instance's status names none: the published one does, so that every shape reads alike.
    const instances =
      status.instances ??
      this.lanes.entries().map(([instance]) => ({
        name: instance,
        state: status.state,
        reason: status.reason,
        last_applied_at: status.last_applied_at,
      }));
    return toPublished({ ...status, instances }, record);
  }

  /** Brings the lanes in line with the targets and the leadership. */
  private sync(graceMs = 0, persist = true): Promise<void> {
    return this.lanes.set(this.leading && !this.stopped ? this.targets : [], graceMs, persist);
  }

  /**
   * A replica that does not lead has a change applied by the leader: it waits (bounded) until the leader
   * published a status for each changed cluster's stored version.
   */
  private async follow(clusters: readonly string[] | undefined): Promise<PassOutcome> {
    const { store } = this.o;
    if (!store.published) return { ok: false, changed: false, error: 'this replica does not lead' };
    const names = clusters ?? store.list().map((r) => r.name);
    const deadline = Date.now() + this.o.waitTimeoutMs + 1_000;
    for (;;) {
      const waiting = names.filter((name) => {
        const record = store.get(name);
        return record !== undefined && store.published?.(name)?.observed !== record.updatedAt;
      });
      if (waiting.length === 0) break;
      if (Date.now() >= deadline || this.stopped)
        return {
          ok: false,
          changed: false,
          error: `the leader has not applied ${waiting.length} change(s) yet`,
        };
      await new Promise((resolve) => setTimeout(resolve, FOLLOW_POLL_MS));
    }
    const failed = names.filter((name) => this.status(name)?.state === 'error');
    return failed.length === 0
      ? { ok: true, changed: true }
      : { ok: false, changed: true, error: `the leader could not apply ${failed.join(', ')}` };
  }
}
