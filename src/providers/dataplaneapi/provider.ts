import type { RawServer, RawState } from '../../haproxy/model.js';
import { ConcurrentChangeError } from '../../model/errors.js';
import { sniMapNameFor } from '../../naming/names.js';
import { applyOperations } from '../../plan/apply.js';
import { backendNamed } from '../../plan/lineage.js';
import type { Plan } from '../../plan/plan.js';
import type { ApplyReport, CloseOptions, Provider, ProviderInfo, ReadOptions } from '../provider.js';
import { createClient, type DataplaneClient } from './client.js';
import { MissingCapabilityError, translate } from './errors.js';
import { MapNames } from './map-names.js';
import { MapFiles, mapsOf, routesByMap } from './map-routing.js';
import { MapState } from './map-state.js';
import type { Snapshot } from './mapping.js';
import type { WritePlan } from './objects.js';
import type { Applied, Counter, DataplaneProviderOptions } from './options.js';
import { Persistence } from './persist.js';
import { RawFile } from './raw-file.js';
import { lineTagsFor } from './raw-lines.js';
import { Reads } from './read.js';
import { Reloads } from './reload.js';
import { applyRuntime } from './runtime.js';
import { applyRuntimeOps, type RuntimeOp, runtimeMapOps, runtimeRequests } from './runtime-maps.js';
import { Session } from './session.js';
import { SlotsPath } from './slots-path.js';
import { snapshotAfter, withServersSent } from './snapshot-after.js';
import { tagWriter } from './tags.js';
import { Transactions } from './transaction.js';
import { planWrites } from './writes.js';

/** See `DataplaneProviderOptions.runtimeMaxRequests`. */
const DEFAULT_RUNTIME_MAX_REQUESTS = 600;

export { DataplaneUnreachableError } from './client.js';
export { MissingCapabilityError, TooManyTransactionsError } from './errors.js';
export type { DataplaneProviderOptions } from './options.js';

/**
 * The default provider: HAProxy's Data Plane API v3 (v3.0 and newer; where ownership tags are kept depends on
 * the version, read off its OpenAPI document: `capability.ts`, `tags.ts`). Reads are two `full_section`
 * lists (frontends, backends), skipped while the configuration version has not moved (`read.ts`); a plan is
 * applied as one transaction committed with one reload (`transaction.ts`), as one edited file when it is
 * large (`raw-file.ts`), or, when it only moves server endpoints, through the runtime path without a reload
 * (`runtime.ts`). See `writes.ts` for how operations become requests, `reload.ts` for how reloads are
 * verified and repaired, `errors.ts` for how the API's answers become the loop's error kinds.
 */
export class DataplaneProvider implements Provider {
  readonly name = 'dataplaneapi';
  private readonly client: DataplaneClient;
  private readonly reloads: Reloads;
  private readonly reads: Reads;
  private readonly transactions: Transactions;
  private readonly rawFile: RawFile;
  private readonly session: Session;
  private readonly names: MapNames;
  private readonly mapFiles: MapFiles;
  private readonly persistence: Persistence;
  /** Moved servers (`backend/server`) found carrying a stream: their move goes through the configuration. */
  private readonly busy = new Set<string>();
  private readonly maps: MapState;
  /** `slots: 'storage'`: the slot backends in a file of the API's general storage. */
  private readonly slots: SlotsPath | undefined;

  constructor(private readonly o: DataplaneProviderOptions) {
    this.client = createClient({
      url: o.url,
      username: o.username,
      password: o.password,
      timeoutMs: o.timeoutMs,
      ...(o.traffic
        ? {
            onRequest: () => o.traffic?.request(),
            onBytes: (direction: 'sent' | 'received', n: number) => o.traffic?.bytes(direction, n),
          }
        : {}),
    });
    this.reloads = new Reloads(this.client, o);
    const capabilities = () => this.session.capabilities;
    // The service names its map after its owner id (`sniMapNameFor`), so a restart reads it back by that name.
    this.names = new MapNames([sniMapNameFor(o.owner.id), ...(o.sniMaps ?? [])]);
    this.reads = new Reads(this.client, o.owner, capabilities, this.names, () => this.persistence.settle());
    this.mapFiles = new MapFiles(this.client);
    this.persistence = new Persistence(this.client, {
      debounceMs: o.persistDebounceMs ?? 100,
      maxDelayMs: o.persistMaxDelayMs ?? 1000,
      logger: o.logger,
      lines: () => lineTagsFor(capabilities()),
      written: (from, to, servers) => this.persistedServers(from, to, servers),
      ...(o.slots === 'storage'
        ? { writeFileServers: (servers) => (this.slots as SlotsPath).persist(servers) }
        : {}),
      writeMap: async (name, text) => {
        await this.mapFiles.write(name, text, AbortSignal.timeout(o.timeoutMs), { requests: 0 });
      },
    });
    this.maps = new MapState(this.client, o.owner, capabilities, this.persistence);
    this.transactions = new Transactions(this.client, this.reloads, o);
    this.rawFile = new RawFile(this.client, this.reloads, { ...o, capabilities });
    this.slots =
      o.slots === 'storage'
        ? new SlotsPath({
            ...o,
            client: this.client,
            reads: this.reads,
            maps: this.maps,
            reloads: this.reloads,
            persistence: () => this.persistence,
            capabilities,
            send: (plan, work, snapshot, signal, counter) => this.send(plan, work, snapshot, signal, counter),
          })
        : undefined;
    this.session = new Session(
      this.client,
      { transactions: this.transactions, reloads: this.reloads, reads: this.reads },
      o.logger,
    );
  }

  /**
   * Checks the API once it answers: capabilities, transactions a crashed run left open, and (not for a
   * readiness probe, which must not reload HAProxy) a view left untrusted by a failed reload.
   */
  async ready(signal: AbortSignal, repair = true): Promise<void> {
    try {
      await this.session.ready(signal, repair);
      if (this.slots && !this.session.capabilities.generalFiles)
        throw new MissingCapabilityError(
          `the Data Plane API at ${this.client.url} (document ${this.session.capabilities.document}) cannot read ` +
            'back the files of its general storage (v3.0 and v3.2 answer {} for any file; v3.4 or newer can): ' +
            'set KUBEBYON_DATAPLANE_SLOTS=config',
        );
    } catch (err) {
      throw this.translate(err);
    }
  }

  async ping(signal: AbortSignal): Promise<ProviderInfo> {
    await this.ready(signal, false);
    try {
      return await this.session.ping(signal);
    } catch (err) {
      throw this.translate(err);
    }
  }

  /**
   * The configuration as read; where a frontend routes by a map, completed with what HAProxy runs (map
   * entries, servers), kept while the configuration version and HAProxy's worker stay the same (`fresh`:
   * read all of it again).
   */
  async readState(signal: AbortSignal, options: ReadOptions = {}): Promise<RawState> {
    await this.ready(signal);
    try {
      const counter = { requests: 0 };
      let snapshot = await this.reads.read(signal);
      if (this.slots && options.fresh) snapshot = await this.slots.moveOut(snapshot, signal, counter);
      if (!routesByMap(snapshot)) return await this.stateOf(snapshot, signal, counter);
      const { pid } = await this.maps.worker(signal, counter);
      const kept = options.fresh ? undefined : this.maps.cached(snapshot.version, pid);
      if (kept) {
        if (kept.snapshot) this.reads.register(kept.state, kept.snapshot);
        return kept.state;
      }
      const raw = await this.stateOf(snapshot, signal, counter);
      const behind = await this.maps.complete(raw, signal, counter);
      this.maps.remember(raw, pid, snapshot.version, snapshot);
      // The file is behind what runs (a crash or a reload before persistence): until it is written, one more
      // reload or crash would lose acknowledged routes, so a full read (start, resync, after a reload: no
      // webhook waits on it) writes it now rather than batched. A failure stays pending and is retried.
      if (behind && options.fresh)
        await this.persistence
          .flush()
          .catch((err) => this.o.logger.warn({ err }, 'servers found behind in the file: written later'));
      return raw;
    } catch (err) {
      throw this.translate(err);
    }
  }

  /** The state of `snapshot`, with the slots file's backends when they live there. */
  private async stateOf(snapshot: Snapshot, signal: AbortSignal, counter: Counter): Promise<RawState> {
    const configured = this.reads.handOutFrom(snapshot);
    return this.slots ? await this.slots.withSlots(configured, snapshot, signal, counter) : configured;
  }

  /** Changes whenever another HAProxy process runs (a reload or restart by anyone). */
  async revision(signal: AbortSignal): Promise<string> {
    try {
      return (await this.maps.worker(signal, { requests: 0 })).revision;
    } catch (err) {
      throw this.translate(err);
    }
  }

  async apply(plan: Plan, current: RawState, signal: AbortSignal): Promise<ApplyReport> {
    signal.throwIfAborted();
    if (plan.operations.length === 0) return { reload: 'none', requests: 0 };
    await this.ready(signal);
    const counter = { requests: 0 };
    for (const name of mapsOf(plan)) this.names.learn(name);
    // Unknown (no read of the worker yet) counts as able: a failure there makes the loop read again.
    const runtimeOps = this.maps.runtimeServers === false ? undefined : runtimeMapOps(plan, current);
    if (runtimeOps && this.fitsRuntime(runtimeOps))
      return this.applyAtRuntime(plan, runtimeOps, current, signal, counter);
    // Moves of servers that carry a stream, through the configuration (which sets the address in place).
    for (const op of plan.operations) if (op.kind === 'update_server') this.busy.delete(serverKey(op));
    let after: Snapshot | undefined;
    try {
      // Servers added at runtime reach the file before anything is written (and reloaded) from it.
      const flushed = this.persistence.isPending;
      if (flushed) await this.persistence.flush();
      const snapshot = flushed ? await this.reads.read(signal) : await this.reads.snapshotOf(current, signal);
      const files = await this.mapFiles.forPlan(plan, current, this.o.owner, signal, counter);
      this.maps.forget();
      // The slot backends' file goes first. The configuration never names its backends (the map alone
      // routes there), so any order of loading the two is consistent.
      const split = this.slots?.split(plan, current);
      const configPlan = split?.config ?? plan;
      const work = planWrites(configPlan, snapshot, {
        runtimeMaxServers: this.o.runtimeMaxServers,
        owner: this.o.owner,
        tags: this.session.capabilities,
        mapFile: (name) => {
          const file = files.get(name);
          if (file === undefined) throw new Error(`map ${name} was not stored before the writes`);
          return file;
        },
      });
      signal.throwIfAborted();
      // Endpoint moves in the file alone (servers carrying streams, or too many for one request each): in
      // place, as runtime actions, no reload.
      if (split?.file && split.moves && work.kind === 'none' && this.slots) {
        await this.slots.file.write(split.file, 'skip', signal, counter);
        const moved = await this.rawFile.movesOnly(split.moves, snapshot.version, signal, counter);
        if (moved) return { reload: 'none', requests: counter.requests };
      }
      // A commit reloads HAProxy anyway: the file is written without a reload of its own, and loaded by it.
      const commitReloads = work.kind === 'transaction' && !work.moves && work.writes.length > 0;
      let reloaded = false;
      if (split?.file && this.slots)
        reloaded = await this.slots.write(split.file, commitReloads ? 'skip' : 'force', signal, counter);
      // Map entries alone write nothing to the configuration: the file's reload loaded their map file.
      const loaded = reloaded && work.kind === 'transaction' && work.writes.length === 0 && !work.moves;
      if (work.kind === 'none' || loaded) {
        after = snapshot;
        // HAProxy now runs the files as written: the plan's target, kept for the next passes as is.
        if (reloaded && this.slots?.worker !== undefined) {
          const target = applyOperations(current, plan.operations, this.o.owner);
          this.maps.remember(target, this.slots.worker, snapshot.version, snapshot);
          this.reads.register(target, snapshot);
        }
        return { reload: reloaded ? 'succeeded' : 'none', requests: counter.requests };
      }
      const send = () =>
        this.send(configPlan, work, snapshot, signal, counter).catch(async (err) => {
          // The file was written for this commit's reload: it is loaded now, as it stands (it names nothing
          // the configuration has), so that what HAProxy runs is what the next read finds.
          if (split?.file && commitReloads) await this.slots?.reload(signal, counter).catch(() => {});
          throw err;
        });
      // With map routing our own reload keeps the revision token: the watch runs no fresh pass of every slot
      // for it; the next read finds the new worker and reads what it runs anyway.
      const done =
        commitReloads && routesByMap(snapshot)
          ? (await this.maps.ourReload(signal, counter, send, (d) => d.reload === 'succeeded')).result
          : await send();
      if (split?.file && commitReloads) await this.slots?.ensureLoaded(split.file, signal, counter);
      // The version moved by our own writes alone: the API now holds the snapshot with them applied.
      if (done.version === snapshot.version + done.versionBumps) {
        this.transactions.prepare(done.version);
        const applied =
          work.kind === 'transaction' && done.moves
            ? { kind: 'runtime' as const, updates: done.moves }
            : work;
        after = snapshotAfter(snapshot, applied, done.version);
      }
      return { reload: reloaded ? 'succeeded' : done.reload, requests: counter.requests };
    } catch (err) {
      throw this.translate(err);
    } finally {
      // Otherwise what was read before no longer tells what is there (a failed runtime apply may have moved
      // some servers already): the next read lists both sections again.
      this.reads.keep(after);
    }
  }

  /**
   * Whether a plan the runtime path can run should: not when it moves a server found carrying a stream; nor,
   * with the slots file, when it is larger than `runtimeMaxRequests` (a burst of new clusters): the file
   * and one reload load it at once, where each runtime request costs the API about 1 ms of CPU.
   */
  private fitsRuntime(ops: readonly RuntimeOp[]): boolean {
    if (ops.some((op) => op.kind === 'update_server' && this.busy.has(serverKey(op)))) return false;
    const most = this.o.runtimeMaxRequests ?? DEFAULT_RUNTIME_MAX_REQUESTS;
    return !this.slots || most <= 0 || runtimeRequests(ops) <= most;
  }

  /**
   * Map routing's runtime path: no configuration write, no reload. The servers changed are written to the
   * file soon after (`persist.ts`); what is kept for the next pass is the state with the plan applied.
   */
  private async applyAtRuntime(
    plan: Plan,
    ops: RuntimeOp[],
    current: RawState,
    signal: AbortSignal,
    counter: { requests: number },
  ): Promise<ApplyReport> {
    const after = applyOperations(current, plan.operations, this.o.owner);
    const touched = new Map<string, RawServer[]>();
    const maps = new Map<string, ReadonlyMap<string, string>>();
    for (const op of ops)
      if ('server' in op) touched.set(op.backend, backendNamed(after, op.backend)?.servers ?? []);
      else maps.set(op.map, after.maps?.find((m) => m.name === op.map)?.entries ?? new Map());
    let draining = 0;
    let busy: string[] = [];
    try {
      ({ draining, busy } = await applyRuntimeOps(this.client, ops, signal, counter));
    } catch (err) {
      // Some steps may have run: the next read reads what HAProxy runs (and persists what it finds).
      this.maps.forget();
      throw this.translate(err);
    }
    if (busy.length > 0) {
      // Those servers still run at their old address: what the file gets of them comes from the next read.
      for (const key of busy) {
        this.busy.add(key);
        touched.delete(key.slice(0, key.indexOf('/')));
      }
      this.maps.forget();
      this.persistence.schedule(touched, maps);
      // The pass reads and plans again at once; that plan moves them through the configuration.
      throw new ConcurrentChangeError(
        `moved servers carry streams (${busy.join(', ')}): moved in place instead`,
      );
    }
    // A server left draining still runs: the next pass reads what runs and deletes it once it can.
    if (draining > 0) this.maps.forget();
    else this.maps.applied(after);
    this.persistence.schedule(touched, maps);
    return { reload: 'none', requests: counter.requests };
  }

  /**
   * Our own write of servers moved the file from `from` to `to`: the objects read stay valid with those
   * servers patched in, so the next pass needs no new read of both lists (which costs a parse of the file).
   */
  private persistedServers(
    from: number | undefined,
    to: number | undefined,
    servers: ReadonlyMap<string, RawServer[]>,
  ): void {
    const read = this.reads.current;
    if (read === undefined || from !== read.version || to === undefined) {
      this.maps.movedTo(from, undefined, undefined);
      return;
    }
    const t = { owner: this.o.owner, writer: tagWriter(this.session.capabilities) };
    const snapshot = withServersSent(read, to, servers, t);
    this.reads.keep(snapshot);
    this.maps.movedTo(from, to, snapshot);
  }

  /** Resolves once what was changed at runtime is in the file (rejects when the write fails). */
  async persisted(): Promise<void> {
    await this.persistence.flush();
  }

  /** The last write of runtime servers to the file: how long it took, and how many backends it wrote. */
  lastPersistence(): { ms: number; backends: number } | undefined {
    return this.persistence.last;
  }

  /** The plan's writes by the path that fits them: runtime, edited file, or transaction. */
  private async send(
    plan: Plan,
    work: Exclude<WritePlan, { kind: 'none' }>,
    snapshot: Snapshot,
    signal: AbortSignal,
    counter: Counter,
  ): Promise<Applied> {
    if (work.kind === 'runtime')
      return applyRuntime(this.client, this.reloads, work.updates, snapshot.version, signal, counter);
    return (
      (await this.rawFile.apply(plan, work, snapshot, signal, counter)) ??
      (await this.transactions.apply(work.writes, snapshot.version, signal, counter))
    );
  }

  private translate(err: unknown): unknown {
    return translate(err, this.client.url, (why) => this.reloads.distrust(why));
  }

  async close(options: CloseOptions = {}): Promise<void> {
    // What runs at runtime reaches the file before the provider goes (best effort: the next start persists
    // what it finds missing); not on a replica that lost the lead, whose leader writes now.
    if (options.persist !== false) await this.persistence.flush().catch(() => {});
    this.persistence.close();
    await this.transactions.close();
    this.client.close();
  }
}

function serverKey(op: { backend: string; server: { name: string } }): string {
  return `${op.backend}/${op.server.name}`;
}
