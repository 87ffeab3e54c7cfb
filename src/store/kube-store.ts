import { setTimeout as sleep } from 'node:timers/promises';
import { CustomObjectsApi, type KubeConfig, PatchStrategy, setHeaderOptions } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import type { ClusterRecord } from '../model/cluster.js';
import { compareStrings } from '../routes/route.js';
import {
  type ClusterInput,
  type DesiredStore,
  type PublishedStatus,
  StaleWriteError,
  type WriteStamp,
} from './desired-store.js';
import { RouteCache } from './kube-cache.js';
import {
  admits,
  appliedBy,
  type CachedRoute,
  fromStatus,
  GROUP,
  listed,
  objectName,
  PLURAL,
  parseRoute,
  type RawRoute,
  type RouteSpec,
  restampedSpec,
  routeObject,
  sameInput,
  sameStatus,
  tombstoneSpec,
  toRecord,
  toStatus,
  upsertSpec,
  VERSION,
} from './kube-route.js';
import { StatusPublisher } from './kube-status.js';
import { type RouteBase, RouteWatch } from './kube-watch.js';

export interface KubeStoreOptions {
  namespace: string;
  logger: Logger;
  /** Unix ms (tests move time). */
  now?: () => number;
  /** How long a tombstone is kept: the replay window plus a margin. */
  tombstoneMs: number;
  /** How long `open` waits for the first list before it gives up (default 30 s). */
  syncTimeoutMs?: number;
}

/** Tries of one write when other replicas keep changing the object in between (409 Conflict). */
const MAX_TRIES = 8;
const WRITE_CONCURRENCY = 16;

/** What a write decided from the object as it stands: put this spec, remove the object, or nothing. */
type Action = { put: RouteSpec } | { remove: true } | undefined;
/** The object a write starts from; `spec` is absent for an object that is not a valid ClusterRoute. */
type Current = { resourceVersion: string; spec?: RouteSpec | undefined } | undefined;

/**
 * The desired state in ClusterRoute objects, shared by every replica. Reads come from an informer's cache;
 * a write resolves once the API server stored it (the cache takes the answer at once, and never goes back
 * to an older version an event brings later). Every write is a replace with the resourceVersion it read,
 * so that two replicas never overwrite each other unseen: on 409 it reads again and decides again. Signed
 * writes carry their stamp into the spec, and a write older than the stored one is refused
 * (`StaleWriteError`): a request replayed to another replica cannot roll a cluster back.
 * (Over 300 lines: the one DesiredStore on the Kubernetes API, its reads and every write's conflict rule.)
 */
export class KubeClusterStore implements DesiredStore {
  private readonly api: CustomObjectsApi;
  private readonly watch: RouteWatch;
  private readonly cache: RouteCache;
  private readonly locks = new Map<string, Promise<void>>();
  private readonly publisher: StatusPublisher;
  private readonly now: () => number;
  private readonly base: RouteBase;

  private constructor(
    kc: KubeConfig,
    private readonly options: KubeStoreOptions,
  ) {
    this.now = options.now ?? Date.now;
    this.base = { group: GROUP, version: VERSION, namespace: options.namespace, plural: PLURAL };
    this.api = kc.makeApiClient(CustomObjectsApi);
    this.cache = new RouteCache(options.logger);
    this.watch = new RouteWatch(
      kc,
      this.api,
      this.base,
      {
        seen: (o) => this.cache.take(o, 'observed'),
        deleted: (o) =>
          this.cache.drop(o.metadata?.name ?? '', o.metadata?.resourceVersion ?? '', 'observed'),
      },
      options.logger,
    );
    this.publisher = new StatusPublisher(
      (cluster, status) => this.statusCurrent(cluster, status),
      (cluster, status) => this.writeStatus(cluster, status),
      options.logger,
    );
  }

  /** Lists and watches the ClusterRoutes of `namespace`; resolves once the first list is in the cache. */
  static async open(kc: KubeConfig, options: KubeStoreOptions): Promise<KubeClusterStore> {
    const store = new KubeClusterStore(kc, options);
    await store.watch.start(options.syncTimeoutMs ?? 30_000);
    return store;
  }

  /** Stops the watch (publish nothing after it; `flush()` first). */
  close(): Promise<void> {
    return this.watch.stop();
  }

  list(): ClusterRecord[] {
    return this.cache.list();
  }

  get(name: string): ClusterRecord | undefined {
    return this.cache.get(name);
  }

  /** Called with cluster names when another replica's write (seen by the watch) changed them. */
  onChange(listener: (names: string[]) => void): void {
    this.cache.onChange(listener);
  }

  async health(): Promise<{ ok: boolean; detail?: string }> {
    return this.watch.health();
  }

  upsert(input: ClusterInput, stamp?: WriteStamp): Promise<ClusterRecord> {
    return this.write(objectName(input.name), (current) => {
      if (!admits(current?.spec, stamp)) throw stale(input.name, current?.spec);
      const spec = upsertSpec(current?.spec, input, stamp, this.now());
      return { action: { put: spec }, result: toRecord(spec) as ClusterRecord };
    });
  }

  /** Signed: leaves a tombstone (refusing older writes until swept); unsigned: deletes the object. */
  delete(name: string, stamp?: WriteStamp): Promise<boolean> {
    return this.write(objectName(name), (current) => {
      if (!current) return { action: undefined, result: false };
      const live = current.spec !== undefined && !current.spec.deleted;
      if (!stamp || !current.spec) return { action: { remove: true }, result: live };
      if (!admits(current.spec, stamp)) throw stale(name, current.spec);
      return { action: { put: tombstoneSpec(current.spec, stamp, this.now()) }, result: live };
    });
  }

  async replaceAll(inputs: ClusterInput[], stamp?: WriteStamp): Promise<{ removed: string[] }> {
    // From a fresh list, not the cache: a cluster another replica just added must not be missed.
    const listed = await this.api.listNamespacedCustomObject(this.base);
    const stored: CachedRoute[] = [];
    for (const raw of (listed.items ?? []) as RawRoute[]) {
      this.cache.take(raw, 'observed');
      const parsed = parseRoute(raw);
      if ('route' in parsed) stored.push(parsed.route);
    }
    const replayed = stamp && stored.find((r) => appliedBy(r.spec, stamp));
    if (replayed) throw stale(replayed.spec.cluster, replayed.spec);

    const wanted = new Map(inputs.map((i) => [i.name, i]));
    const removed: string[] = [];
    const gone = stored.filter((r) => !r.spec.deleted && !wanted.has(r.spec.cluster));
    await eachLimited([...wanted.values()], WRITE_CONCURRENCY, (input) =>
      this.write(objectName(input.name), (current) => {
        const previous = current?.spec;
        // Per cluster the stamp rule: a newer write stored meanwhile is left as it is.
        if (!admits(previous, stamp)) return { action: undefined, result: undefined };
        if (previous && sameInput(previous, input)) {
          // Unchanged, but the stamp is recorded: an older replayed write must not roll it back either.
          const put = stamp && restampedSpec(previous, stamp);
          return { action: put && { put }, result: undefined };
        }
        return { action: { put: upsertSpec(previous, input, stamp, this.now()) }, result: undefined };
      }),
    );
    await eachLimited(gone, WRITE_CONCURRENCY, async (route) => {
      const cluster = await this.write(route.name, (current) => {
        const spec = current?.spec;
        if (!spec || spec.deleted || !admits(spec, stamp)) return { action: undefined, result: undefined };
        const action = stamp ? { put: tombstoneSpec(spec, stamp, this.now()) } : { remove: true as const };
        return { action, result: spec.cluster };
      });
      if (cluster !== undefined) removed.push(cluster);
    });
    return { removed: removed.sort(compareStrings) };
  }

  /**
   * Creates a cluster with the record's own claimedAt/updatedAt (an imported state file keeps its claim
   * order), unless an object (or tombstone) for it exists. Resolves with whether it created one.
   */
  importRecord(record: ClusterRecord): Promise<boolean> {
    return this.write(objectName(record.name), (current) => {
      if (current) return { action: undefined, result: false };
      const { name, host, target, authorizedNetworks, claimedAt, updatedAt } = record;
      const spec = { cluster: name, host, target, ...listed(authorizedNetworks), claimedAt, updatedAt };
      return { action: { put: spec }, result: true };
    });
  }

  /** Deletes tombstones older than `tombstoneMs`, unless changed meanwhile; resolves with their clusters. */
  async sweepTombstones(): Promise<string[]> {
    const cutoff = (this.now() - this.options.tombstoneMs) / 1000;
    const due = this.cache
      .all()
      .filter((r) => r.spec.deleted && (r.spec.signedAt ?? r.spec.updatedAt / 1000) < cutoff);
    const swept: string[] = [];
    await eachLimited(due, WRITE_CONCURRENCY, async (route) => {
      // Once only: if a replica revived it meanwhile, the precondition fails and it stays.
      const done = await this.write(
        route.name,
        (current) => {
          const same = current?.resourceVersion === route.resourceVersion;
          return { action: same ? { remove: true } : undefined, result: same };
        },
        1,
      ).catch((err: unknown) => {
        if (code(err) === 409 || code(err) === 404) return false;
        throw err;
      });
      if (done) swept.push(route.spec.cluster);
    });
    return swept.sort(compareStrings);
  }

  /** The status last published for a cluster, as the cached object shows it. */
  published(name: string): PublishedStatus | undefined {
    const route = this.cache.route(objectName(name));
    return route && route.spec.cluster === name ? fromStatus(route.status) : undefined;
  }

  /** Writes a cluster's status in the background (see `StatusPublisher`); `flush()` awaits it. */
  publish(name: string, status: PublishedStatus): void {
    this.publisher.publish(name, status);
  }

  flush(): Promise<void> {
    return this.publisher.flush();
  }

  /** Status writes sent so far (coalesced and skipped ones not counted). */
  statusWrites(): number {
    return this.publisher.writes;
  }

  private statusCurrent(cluster: string, status: PublishedStatus): boolean {
    const route = this.cache.route(objectName(cluster));
    // Nothing to publish on: the cluster is gone (its next version gets its own status).
    if (!route || route.spec.cluster !== cluster || route.spec.deleted) return true;
    return sameStatus(fromStatus(route.status), fromStatus(toStatus(status)));
  }

  private async writeStatus(cluster: string, status: PublishedStatus): Promise<void> {
    const written = await this.api.patchNamespacedCustomObjectStatus(
      { ...this.base, name: objectName(cluster), body: { status: toStatus(status) } },
      setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
    );
    this.cache.take(written, 'own');
  }

  /**
   * One write to one object, in line with this replica's other writes to it: `decide` sees the object as
   * cached (or, after a 409, as read again) and says what to write; a StaleWriteError it throws changes nothing.
   */
  private write<T>(
    name: string,
    decide: (current: Current) => { action: Action; result: T },
    tries = MAX_TRIES,
  ): Promise<T> {
    return this.serial(name, async () => {
      let current: Current = this.cache.route(name);
      for (let attempt = 1; ; attempt++) {
        const { action, result } = decide(current);
        if (!action) return result;
        try {
          if ('remove' in action) {
            const body = current ? { preconditions: { resourceVersion: current.resourceVersion } } : {};
            await this.api.deleteNamespacedCustomObject({ ...this.base, name, body });
            this.cache.drop(name, current?.resourceVersion ?? '', 'own');
          } else {
            const body = routeObject(this.options.namespace, action.put, current?.resourceVersion);
            const written = current
              ? await this.api.replaceNamespacedCustomObject({ ...this.base, name, body })
              : await this.api.createNamespacedCustomObject({ ...this.base, body });
            this.cache.take(written, 'own');
          }
          return result;
        } catch (err) {
          const retry = code(err) === 409 || (code(err) === 404 && current !== undefined);
          if (!retry || attempt >= tries) throw err;
          this.options.logger.debug(
            { object: name, attempt, status: code(err) },
            'ClusterRoute changed meanwhile',
          );
          // Another replica wrote first: read what it stored, and decide again after a short random pause.
          await sleep(Math.random() * 10 * attempt);
          current = await this.read(name);
        }
      }
    });
  }

  private async read(name: string): Promise<Current> {
    try {
      const raw = (await this.api.getNamespacedCustomObject({ ...this.base, name })) as RawRoute;
      this.cache.take(raw, 'observed');
      const parsed = parseRoute(raw);
      return {
        resourceVersion: raw.metadata?.resourceVersion ?? '',
        spec: 'route' in parsed ? parsed.route.spec : undefined,
      };
    } catch (err) {
      if (code(err) !== 404) throw err;
      const cached = this.cache.route(name);
      if (cached) this.cache.drop(name, cached.resourceVersion, 'observed');
      return undefined;
    }
  }

  private serial<T>(name: string, fn: () => Promise<T>): Promise<T> {
    const run = (this.locks.get(name) ?? Promise.resolve()).then(fn);
    const tail = run.then(
      () => {},
      () => {},
    );
    this.locks.set(name, tail);
    void tail.then(() => {
      if (this.locks.get(name) === tail) this.locks.delete(name);
    });
    return run;
  }
}

function stale(cluster: string, spec: RouteSpec | undefined): StaleWriteError {
  return new StaleWriteError(cluster, spec?.signedAt ?? 0);
}

function code(err: unknown): number | undefined {
  return (err as { code?: unknown })?.code === undefined
    ? undefined
    : Number((err as { code: unknown }).code);
}

/** Runs `fn` on every item, at most `limit` at a time; rejects with the first error once all are done. */
async function eachLimited<T>(items: T[], limit: number, fn: (item: T) => Promise<unknown>) {
  const errors: unknown[] = [];
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const item = items[next++] as T;
      await fn(item).catch((err: unknown) => errors.push(err));
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  if (errors.length > 0) throw errors[0];
}
