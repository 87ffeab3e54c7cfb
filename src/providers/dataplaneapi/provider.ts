import { PERSIST_DELAY_MS } from '../../config/settings.js';
import { SlotAllowIndex } from '../../haproxy/allow-file.js';
import type { HaproxyState } from '../../haproxy/model.js';
import { slotAllowMapName } from '../../haproxy/slot-allow.js';
import { ConcurrentChangeError, errorText, TerminalError } from '../../model/errors.js';
import { allowMapNameFor, sniMapNameFor } from '../../naming/names.js';
import { isAllowOperation } from '../../plan/operations.js';
import type { Plan } from '../../plan/plan.js';
import type { Reading } from '../../plan/reading.js';
import { systemClock } from '../../timing/clock.js';
import { Lane } from '../lane.js';
import type { ApplyReport, Change, CloseOptions, Provider, ProviderInfo, RawRead } from '../provider.js';
import { checkApi } from './api-check.js';
import type { Capabilities } from './capability.js';
import { changedSections, touchedBy } from './changes.js';
import { checkedName } from './checked.js';
import { choosePath, type Path } from './choose.js';
import { createClient, type DataplaneClient } from './client.js';
import { type DataplaneProviderOptions, RUNTIME_MAX_REQUESTS } from './config.js';
import { lineTagsFor, type SlotGuards } from './config-text.js';
import { translate } from './errors.js';
import { Files } from './files.js';
import { MapNames } from './map-names.js';
import { MapFiles } from './maps.js';
import { type Pending, Persistence } from './persist.js';
import { ConfigReads } from './read.js';
import { type Counter, Workers } from './reload.js';
import { Revision } from './revision.js';
import { withRunning } from './running.js';
import { applyRuntimeOps } from './runtime.js';
import { readServerStats } from './runtime-reads.js';
import { fileBackendNames, renderAhead, SlotsFile, slotsFileName } from './slots.js';
import { StorageSlots } from './storage-slots.js';
import { sweepTransactions } from './sweep.js';

export { DataplaneUnreachableError } from './client.js';
export { type DataplaneProviderOptions, RUNTIME_MAX_REQUESTS } from './config.js';
export { MissingCapabilityError } from './errors.js';

/**
 * HAProxy's Data Plane API v3 (v3.0 and newer). Reads the configuration as text (`read.ts`, `config-text.ts`)
 * with what HAProxy runs beside it (`running.ts`); applies each plan by one of three paths that one pure
 * function chooses (`choose.ts`): the runtime endpoints (`runtime.ts`), or a write of the files with or
 * without a reload (`files.ts`). `docs/DATAPLANEAPI.md` says which, when and why. Where ownership tags are
 * kept depends on the version, read off its OpenAPI document (`capability.ts`); this provider only writes
 * them, the registry reads them.
 * (Over 300 lines: the Provider contract's one class, with the state the paths share: what runs, what is
 * draining or busy, the version last written. Each path, the reads and the files live in their own modules.)
 */
export class DataplaneProvider implements Provider {
  readonly name = 'dataplaneapi';
  private readonly client: DataplaneClient;
  private readonly workers: Workers;
  private readonly reads: ConfigReads;
  private readonly names: MapNames;
  private readonly maps: MapFiles;
  private readonly storage: StorageSlots | undefined;
  private readonly files: Files;
  private readonly persistence: Persistence;
  private caps: Capabilities | undefined;
  private apiVersion: string | undefined;
  private swept = false;
  /** Servers (`backend/server`) found carrying a stream when a move tried to delete them. */
  private readonly busy = new Set<string>();
  /** Servers (`backend/server`) left draining by a delete: kept out of the files. */
  private draining = new Set<string>();
  /** What the last read found the files behind on, for `settle`. */
  private drift: { backends: Set<string>; maps: Set<string> } | undefined;
  /** The state HAProxy runs, as far as this provider knows (the last reading or change target). */
  private known: HaproxyState | undefined;
  /** The revision token: HAProxy's process, and how often someone else wrote the configuration. */
  private readonly revisions: Revision;
  /** One apply at a time (and reads wait for it). */
  private readonly applies = new Lane();
  /**
   * One writer of the files at a time: an apply's file path and the batched persistence. Apart from the
   * applies, so that a runtime apply does not wait behind a persistence (hundreds of ms at 20000 slots).
   */
  private readonly fileWriters = new Lane();
  /** The logical allow map by slot: the slots' own maps' runtime changes and text (`slot-allow.ts`). */
  private readonly allow = new SlotAllowIndex((detail) => new TerminalError(detail));
  /** The owner's allow map, and where the storage keeps each slot's own. */
  private readonly guards: SlotGuards;
  /** Versions of pushes of ours the API went away during (`sweepAfterWrite`). */
  private readonly interruptedPushes = new Set<number>();
  /** The one allow map of releases before per-slot maps was deleted from the storage (after a reload). */
  private oldAllowMapGone = false;

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
    this.workers = new Workers(this.client, o);
    // The service names its map after its owner id (`sniMapNameFor`), so a restart reads it back by that name.
    this.names = new MapNames([sniMapNameFor(o.owner.id), ...(o.sniMaps ?? [])]);
    const allowMap = o.allowMap ?? allowMapNameFor(o.owner.id);
    this.reads = new ConfigReads(this.client, (file) => this.names.logical(file), allowMap);
    this.revisions = new Revision(this.workers, this.reads);
    this.maps = new MapFiles(this.client);
    this.guards = { allowMap, path: (name) => this.maps.pathOf(name) };
    const slots =
      o.slots === 'storage'
        ? new SlotsFile(this.client, slotsFileName(o.owner.id), o.reloadTimeoutMs + o.timeoutMs, this.guards)
        : undefined;
    this.files = new Files({
      client: this.client,
      allow: this.allow,
      guards: this.guards,
      reads: this.reads,
      maps: this.maps,
      workers: this.workers,
      slots,
      lines: () => lineTagsFor(this.capabilities),
      interrupted: (version) => this.interruptedPushes.add(version),
      timeoutMs: o.timeoutMs,
      reloadTimeoutMs: o.reloadTimeoutMs,
      logger: o.logger,
    });
    this.storage = slots && new StorageSlots(this.client, this.workers, this.files, slots);
    const delay = o.persistDelayMs ?? PERSIST_DELAY_MS;
    this.persistence = new Persistence({
      clock: o.clock ?? systemClock,
      debounceMs: delay,
      maxDelayMs: Math.max(1000, delay),
      logger: o.logger,
      write: (target, pending) =>
        this.fileWriters.run(() => this.revisions.persist(() => this.persist(target, pending))),
    });
  }

  /** Writes what the runtime changed to the files, without a reload (`Persistence` calls it). */
  private async persist(target: HaproxyState, pending: Pending): Promise<void> {
    const signal = AbortSignal.timeout(this.o.timeoutMs * 2);
    const write = {
      target,
      frontends: new Set<string>(),
      ...pending,
      draining: this.draining,
      reload: false,
    };
    await this.files.write(write, signal, { requests: 0 }).catch((err) => {
      throw this.translate(err);
    });
    this.revisions.wrote(this.reads.current?.version);
    await this.sweepAfterWrite(signal);
  }

  /** What is pending, written now (a failure leaves it pending: the batch tries again). */
  private async persistNow(target: HaproxyState): Promise<void> {
    const pending = this.persistence.take();
    try {
      await this.persist(target, pending);
      this.persistence.follow(target);
    } catch (err) {
      this.persistence.giveBack(pending);
      this.o.logger.warn({ err: errorText(err) }, 'a list change is not yet in the files; retried');
    }
  }

  /**
   * A list change's slots' own maps written to the storage (`slot-allow.ts`), one small file per slot it
   * touched: no configuration read or push, since a list change changes neither. A failure leaves the maps
   * to the batch, as `persistNow` does.
   */
  private async persistLists(
    change: Change,
    ops: ReadonlyArray<{ map: string; key: string }>,
    signal: AbortSignal,
    counter: Counter,
  ): Promise<void> {
    const target = change.to.state;
    const maps = new Set<string>();
    try {
      const writes = this.allow
        .touchedMaps(ops, change.from.state, target)
        .map(({ map, text }): [string, string] => [map, text]);
      for (const [map] of writes) maps.add(map);
      await this.maps.writeMany(writes, signal, counter);
      this.persistence.follow(target);
    } catch (err) {
      if (err instanceof TerminalError) throw err;
      this.persistence.schedule(target, new Set(), maps);
      this.o.logger.warn({ err: errorText(err) }, 'a list change is not yet in the files; retried');
    }
  }

  private get capabilities(): Capabilities {
    if (!this.caps) throw new Error('the Data Plane API has not been checked yet');
    return this.caps;
  }

  /**
   * Checks the API once it answers: what its document offers, transactions nobody will commit, and (not for
   * a readiness probe, which must not reload HAProxy) a file left untrusted by a failed reload.
   */
  async ready(signal: AbortSignal, repair = true): Promise<void> {
    try {
      if (!this.caps) {
        const version = await this.apiVersionOf(signal);
        this.caps = await checkApi(
          this.client,
          { storage: !!this.storage, version, logger: this.o.logger },
          signal,
        );
      }
      if (!this.swept) {
        await sweepTransactions(this.client, this.o.ledgerFile, this.o.logger, signal);
        this.swept = true;
      }
      if (repair && this.workers.untrusted) {
        this.reads.forget();
        this.revisions.wrote(await this.workers.reloadFromDisk(signal));
      }
    } catch (err) {
      throw this.translate(err);
    }
  }

  async ping(signal: AbortSignal): Promise<ProviderInfo> {
    await this.ready(signal, false);
    try {
      await this.client.GET('/services/haproxy/configuration/version', { signal });
      const version = await this.apiVersionOf(signal);
      const health = await this.client.GET('/health', { signal });
      if (health.data.haproxy === 'down')
        throw new Error(`the Data Plane API at ${this.client.url} answers, but reports HAProxy down`);
      return { version: `Data Plane API ${version}`, endpoint: this.client.url };
    } catch (err) {
      throw this.translate(err);
    }
  }

  /**
   * HAProxy's process (a reload or restart by anyone starts another) and how often someone else wrote the
   * configuration: its version moving past the one this provider last read or wrote. Waits for an apply
   * under way, whose answer says the version it left; not for a batched persistence (`revision.ts`).
   */
  async revision(signal: AbortSignal): Promise<string> {
    await this.applies.idle();
    try {
      return await this.revisions.now(signal, { requests: 0 });
    } catch (err) {
      throw this.translate(err);
    }
  }

  async read(signal: AbortSignal): Promise<RawRead> {
    await this.ready(signal);
    try {
      await this.applies.idle();
      // A full read sees the files as a persistence under way leaves them.
      await this.fileWriters.idle();
      const counter = { requests: 0 };
      const revision = await this.revisions.now(signal, counter);
      const runtime = this.workers.runtimeServers !== false;
      // What runs is asked for first and the files read while the API answers (seconds at 20000 servers).
      const stats = runtime ? readServerStats(this.client, signal, counter) : undefined;
      stats?.catch(() => undefined); // awaited by `withRunning`, unless a read of the files throws first
      const config = await this.reads.read(signal, counter);
      const raw = this.storage ? await this.storage.merge(config.state(), signal, counter) : config.state();
      const running = await withRunning(this.client, raw, runtime, this.known, signal, counter, stats);
      this.drift = running.drift;
      this.draining = running.draining;
      return { raw: running.raw, revision };
    } catch (err) {
      throw this.translate(err);
    }
  }

  /** The files are brought in line with what runs, for what the registry found ours. */
  async settle(reading: Reading): Promise<void> {
    this.known = reading.state;
    this.persistence.follow(reading.state);
    this.files.prepare(reading.state);
    // The slot files' sections of the objects later applies derive theirs from, rendered now (in the full
    // pass) rather than by the first persistence, while a change waits.
    if (this.storage) {
      const inFiles = fileBackendNames(reading.state);
      const backends = reading.state.backends.filter((b) => inFiles.has(b.name));
      this.storage.file.adopt(backends);
      if (this.maps.folderKnown) await renderAhead(backends, this.guards);
    }
    const drift = this.drift ?? { backends: new Set(), maps: new Set() };
    this.drift = undefined;
    const owned = new Set(reading.state.frontends.flatMap((f) => (f.owned && f.sniMap ? [f.sniMap] : [])));
    for (const b of reading.state.backends)
      if (b.owned && b.allowMap === slotAllowMapName(this.guards.allowMap, b.name)) owned.add(b.allowMap);
    const backends = [...drift.backends].filter((name) => reading.backend(name)?.owned);
    const maps = [...drift.maps].filter((name) => owned.has(name));
    // The files are behind what runs (a crash or a reload before persistence): until they are written, one
    // more reload or crash would lose acknowledged routes, so they are written now rather than batched.
    if (backends.length > 0 || maps.length > 0) {
      this.persistence.schedule(reading.state, backends, maps);
      await this.persistence.flush();
    }
    await this.relocateSlots(reading);
  }

  /**
   * The upgrade to `slots: 'storage'`: slot backends the configuration holds move to the storage's files
   * with one reload (`storage-slots.ts`).
   */
  private async relocateSlots(reading: Reading): Promise<void> {
    const storage = this.storage;
    const config = this.reads.current;
    if (!storage || !config) return;
    const moving = storage.misplaced(reading, config.state());
    if (moving.size === 0) return;
    await this.applies.run(() =>
      this.fileWriters.run(async () => {
        const signal = AbortSignal.timeout(this.o.reloadTimeoutMs + this.o.timeoutMs * 4);
        const pending = this.persistence.take();
        await storage.relocate(reading, moving, pending, this.draining, signal, { requests: 0 });
        this.revisions.wrote(this.reads.current?.version);
        this.o.logger.info(
          { backends: moving.size },
          'slot backends moved from the configuration to the slots files (one reload)',
        );
      }),
    );
  }

  async apply(plan: Plan, change: Change, signal: AbortSignal): Promise<ApplyReport> {
    signal.throwIfAborted();
    if (plan.operations.length === 0) return { reload: 'none', requests: 0 };
    await this.ready(signal);
    for (const op of plan.operations)
      if (op.kind === 'create_frontend' || op.kind === 'update_frontend')
        this.names.learn(op.frontend.sniMap);
    return this.applies.run(async () => {
      const counter = { requests: 0 };
      try {
        if ((await this.revisions.now(signal, counter)) !== change.revision)
          throw new ConcurrentChangeError('HAProxy or its configuration changed since the plan was made');
        // A server the plan adds or updates is wanted: no longer kept out of the files as draining.
        for (const op of plan.operations)
          if (op.kind === 'create_server' || op.kind === 'update_server')
            this.draining.delete(`${op.backend}/${op.server.name}`);
        const path = choosePath(plan, change.from, {
          runtimeServers: this.workers.runtimeServers,
          busy: this.busy,
          maxRuntimeRequests: this.storage ? RUNTIME_MAX_REQUESTS : undefined,
        });
        const report = await this.send(path, change, signal, counter);
        this.known = change.to.state;
        return report;
      } catch (err) {
        throw this.translate(err);
      }
    });
  }

  /** The change by the path chosen for it. */
  private async send(
    path: Path,
    change: Change,
    signal: AbortSignal,
    counter: Counter,
  ): Promise<ApplyReport> {
    const target = change.to.state;
    if (path.kind === 'runtime') {
      const touched = touchedBy(path.steps);
      const { draining, busy } = await applyRuntimeOps(
        this.client,
        path.steps,
        signal,
        counter,
        this.allow.stepsFrom(path.steps, change.from.state),
      );
      for (const key of draining) this.draining.add(key);
      if (busy.length > 0) {
        // Those servers still run at their old address: the next pass moves them in place.
        for (const key of busy) this.busy.add(key);
        throw new ConcurrentChangeError(
          `moved servers carry streams (${busy.join(', ')}): moved in place instead`,
        );
      }
      // A list change is in the files before it is acknowledged: a reload by anyone right after (the
      // service up or killed) must not bring back a list that was narrowed.
      const lists = path.steps.filter(isAllowOperation);
      if (lists.length > 0 && lists.length === path.steps.length && !this.persistence.isPending) {
        // Only lists changed, and the files hold every route: the allow maps alone are written.
        await this.fileWriters.run(() => this.persistLists(change, lists, signal, counter));
      } else {
        this.persistence.schedule(target, touched.backends, touched.maps);
        if (lists.length > 0) await this.fileWriters.run(() => this.persistNow(target));
      }
      // A server left draining still runs: the next pass reads what runs and deletes it once it can.
      return {
        reload: 'none',
        requests: counter.requests,
        ...(draining.length > 0 ? {} : { revision: change.revision }),
      };
    }
    return this.fileWriters.run(() => this.sendFiles(path, change, signal, counter));
  }

  /** A change through the files (a reload, moves in place, a structure written): one writer of them. */
  private async sendFiles(
    path: Exclude<Path, { kind: 'runtime' }>,
    change: Change,
    signal: AbortSignal,
    counter: Counter,
  ): Promise<ApplyReport> {
    const target = change.to.state;
    const pending = this.persistence.take();
    const changed = changedSections(change);
    const moves = path.kind === 'moves' ? path.moves : undefined;
    for (const m of moves ?? []) this.busy.delete(`${m.backend}/${m.server.name}`);
    try {
      await this.files.write(
        {
          target,
          frontends: changed.frontends,
          backends: new Set([...changed.backends, ...pending.backends]),
          maps: new Set([...changed.maps, ...pending.maps]),
          draining: this.draining,
          reload: path.kind === 'reload',
          ...(moves ? { moves } : {}),
        },
        signal,
        counter,
      );
    } catch (err) {
      this.persistence.giveBack(pending);
      throw err;
    }
    this.persistence.follow(target);
    this.revisions.wrote(this.reads.current?.version);
    if (path.kind === 'reload') await this.storage?.ensureLoaded(target, signal, counter);
    if (path.kind === 'reload') await this.removeOldAllowMap(target, signal, counter);
    await this.sweepAfterWrite(signal);
    const revision = await this.revisions.now(signal, counter);
    return { reload: path.kind === 'reload' ? 'succeeded' : 'none', requests: counter.requests, revision };
  }

  /**
   * The one allow map of releases before per-slot maps, deleted from the storage once HAProxy runs a
   * guard that no longer names it (best effort, once per start: it is ours, and nothing reads it).
   */
  private async removeOldAllowMap(
    target: HaproxyState,
    signal: AbortSignal,
    counter: Counter,
  ): Promise<void> {
    if (this.oldAllowMapGone || !target.frontends.some((f) => f.owned && f.edge)) return;
    this.oldAllowMapGone = true;
    await this.maps
      .remove(this.guards.allowMap, signal, counter)
      .catch((err) => this.o.logger.warn({ err: errorText(err) }, 'could not delete the old allow map'));
  }

  /** The refusals table's entries (`GET /runtime/stick_tables/{table}/entries`): slot -> connections refused. */
  async refusals(table: string, signal: AbortSignal): Promise<Map<string, number>> {
    try {
      const res = await this.client.GET('/services/haproxy/runtime/stick_tables/{parent_name}/entries', {
        params: { path: { parent_name: checkedName(table, 'table') } },
        signal,
      });
      const out = new Map<string, number>();
      for (const e of res.data ?? [])
        if (e.key !== undefined && typeof e.gpc0 === 'number') out.set(e.key, e.gpc0);
      return out;
    } catch (err) {
      throw this.translate(err);
    }
  }

  /** Resolves once what was changed at runtime is in the files. */
  async persisted(): Promise<void> {
    await this.persistence.flush();
  }

  /** The last write of runtime changes to the files: how long it took, and how many backends it wrote. */
  lastPersistence(): { ms: number; backends: number } | undefined {
    return this.persistence.last;
  }

  async close(options: CloseOptions = {}): Promise<void> {
    // What runs at runtime reaches the files before the provider goes (best effort: the next start writes
    // what it finds missing); not on a replica that lost the lead, whose leader writes now.
    if (options.persist !== false) await this.persistence.flush().catch(() => {});
    await this.persistence.close();
    await this.applies.idle();
    await this.fileWriters.idle();
    this.client.close();
  }

  private async apiVersionOf(signal: AbortSignal): Promise<string> {
    if (this.apiVersion === undefined) {
      const info = await this.client.GET('/info', { signal });
      this.apiVersion = info.data.api?.version ?? 'unknown';
    }
    return this.apiVersion;
  }

  private translate(err: unknown): unknown {
    return translate(err, this.client.url, (why) => this.workers.distrust(why));
  }

  /**
   * The transaction the API opened for a push of ours and left when it went away (killed, restarted with
   * its container), deleted once a write has moved the configuration past its version: only those of the
   * versions such pushes were made at (best effort; the next start sweeps too).
   */
  private async sweepAfterWrite(signal: AbortSignal): Promise<void> {
    if (this.interruptedPushes.size === 0) return;
    const versions = new Set(this.interruptedPushes);
    this.interruptedPushes.clear();
    await sweepTransactions(this.client, undefined, this.o.logger, signal, versions).catch((err) => {
      for (const v of versions) this.interruptedPushes.add(v);
      this.o.logger.warn({ err: errorText(err) }, 'could not sweep transactions after the API came back');
    });
  }
}
