import type { Logger } from 'pino';
import { PERSIST_DELAY_MS } from '../../config/settings.js';
import type { HaproxyState, RawState, Tagger } from '../../haproxy/model.js';
import { ConcurrentChangeError, TerminalError } from '../../model/errors.js';
import { sniMapNameFor } from '../../naming/names.js';
import type { Plan } from '../../plan/plan.js';
import type { Reading } from '../../plan/reading.js';
import { type Clock, systemClock } from '../../timing/clock.js';
import type {
  ApplyReport,
  Change,
  CloseOptions,
  Provider,
  ProviderInfo,
  ProviderTraffic,
  RawRead,
} from '../provider.js';
import { type Capabilities, readCapabilities } from './capability.js';
import { choosePath, type Path } from './choose.js';
import { createClient, type DataplaneClient, DataplaneHttpError } from './client.js';
import { lineTagsFor } from './config-text.js';
import { MissingCapabilityError, translate } from './errors.js';
import { Files, putBack } from './files.js';
import { MapNames } from './map-names.js';
import { MapFiles } from './maps.js';
import { Persistence } from './persist.js';
import { ConfigReads } from './read.js';
import { type Counter, Workers } from './reload.js';
import { withRunning } from './running.js';
import { applyRuntimeOps } from './runtime.js';
import { fileBackendNames, SlotsFile, slotsFileName } from './slots.js';
import { sweepTransactions } from './sweep.js';

export { DataplaneUnreachableError } from './client.js';
export { MissingCapabilityError } from './errors.js';

/**
 * With the slots in the API's storage: the most runtime requests one plan sends (a new route costs three:
 * add server, ready, map entry). A larger plan (a burst of new clusters) is written to the files and loaded
 * with one reload: each runtime request costs the API about 1 ms of CPU, so a burst of 1000 new routes at
 * 5000 was 2.4 s this way against 6.3 s at runtime (bench/results/zero-reload.md, 2026-12-04).
 */
export const RUNTIME_MAX_REQUESTS = 600;

export interface DataplaneProviderOptions {
  /** The API's root, e.g. `http://127.0.0.1:5555` (`/v3` is added). */
  url: string;
  username: string;
  password: string;
  /** Longest one request may take. */
  timeoutMs: number;
  /** Longest a reload may take. */
  reloadTimeoutMs: number;
  /**
   * Where the slot backends live: `config` (the default), in the configuration file with the rest;
   * `storage`, in files of the API's general storage that HAProxy loads with a second `-f` (`slots.ts`).
   */
  slots?: 'config' | 'storage';
  /** The SNI maps' names as plans give them (the storage renames a map on upload); plans' names are learnt too. */
  sniMaps?: string[];
  /** The ledger of open transactions a release before this one kept: swept at start (`sweep.ts`). */
  ledgerFile?: string;
  /** Servers changed at runtime are written to the files this long after the last change (and at most 1 s after the first). */
  persistDelayMs?: number;
  owner: Tagger;
  logger: Logger;
  traffic?: ProviderTraffic;
  clock?: Clock;
}

/**
 * HAProxy's Data Plane API v3 (v3.0 and newer). Reads the configuration as text (`read.ts`, `config-text.ts`)
 * with what HAProxy runs beside it (`running.ts`); applies each plan by one of three paths that one pure
 * function chooses (`choose.ts`): the runtime endpoints (`runtime.ts`), or a write of the files with or
 * without a reload (`files.ts`). `docs/DATAPLANEAPI.md` says which, when and why. Where ownership tags are
 * kept depends on the version, read off its OpenAPI document (`capability.ts`); this provider only writes
 * them, the registry reads them.
 */
export class DataplaneProvider implements Provider {
  readonly name = 'dataplaneapi';
  private readonly client: DataplaneClient;
  private readonly workers: Workers;
  private readonly reads: ConfigReads;
  private readonly names: MapNames;
  private readonly maps: MapFiles;
  private readonly slots: SlotsFile | undefined;
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
  /** The configuration version this provider last read or wrote, and how often someone else moved it. */
  private version: number | undefined;
  private foreignWrites = 0;
  /** One writer at a time: applies and persistence write the same files. */
  private queue: Promise<unknown> = Promise.resolve();

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
    this.reads = new ConfigReads(this.client, (file) => this.names.logical(file));
    this.maps = new MapFiles(this.client);
    this.slots =
      o.slots === 'storage'
        ? new SlotsFile(this.client, slotsFileName(o.owner.id), o.reloadTimeoutMs + o.timeoutMs)
        : undefined;
    this.files = new Files({
      client: this.client,
      reads: this.reads,
      maps: this.maps,
      workers: this.workers,
      slots: this.slots,
      lines: () => lineTagsFor(this.capabilities),
      timeoutMs: o.timeoutMs,
      reloadTimeoutMs: o.reloadTimeoutMs,
      logger: o.logger,
    });
    const delay = o.persistDelayMs ?? PERSIST_DELAY_MS;
    this.persistence = new Persistence({
      clock: o.clock ?? systemClock,
      debounceMs: delay,
      maxDelayMs: Math.max(1000, delay),
      logger: o.logger,
      write: (target, pending) =>
        this.serialized(async () => {
          const counter = { requests: 0 };
          const signal = AbortSignal.timeout(o.timeoutMs * 2);
          const write = {
            target,
            frontends: new Set<string>(),
            ...pending,
            draining: this.draining,
            reload: false,
          };
          await this.files.write(write, signal, counter).catch((err) => {
            throw this.translate(err);
          });
          this.version = this.reads.current?.version;
        }),
    });
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
        const spec = await this.client.GET('/specification_openapiv3', { signal });
        const check = readCapabilities(spec.data);
        if (!check.ok)
          throw new MissingCapabilityError(
            `the Data Plane API at ${this.client.url} lacks what this service needs: ${check.missing.join('; ')}`,
          );
        if (this.slots && !check.capabilities.generalFiles)
          throw new MissingCapabilityError(
            `the Data Plane API at ${this.client.url} (document ${check.capabilities.document}) cannot read ` +
              'back the files of its general storage (v3.0 and v3.2 answer {} for any file; v3.4 or newer can): ' +
              'set KUBEBYON_DATAPLANE_SLOTS=config',
          );
        const version = await this.apiVersionOf(signal);
        this.caps = check.capabilities;
        this.o.logger.info(
          { api: version, ...this.caps },
          `Data Plane API ${version}: ${describeCapabilities(this.caps)}`,
        );
      }
      if (!this.swept) {
        await sweepTransactions(this.client, this.o.ledgerFile, this.o.logger, signal);
        this.swept = true;
      }
      if (repair && this.workers.untrusted) {
        this.reads.forget();
        this.version = await this.workers.reloadFromDisk(signal);
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
   * configuration: its version moving past the one this provider last read or wrote. Waits for a write of
   * ours under way, whose answer says the version it left.
   */
  async revision(signal: AbortSignal): Promise<string> {
    await this.queue.catch(() => {});
    try {
      return await this.revisionNow(signal, { requests: 0 });
    } catch (err) {
      throw this.translate(err);
    }
  }

  private async revisionNow(signal: AbortSignal, counter: Counter): Promise<string> {
    const { generation } = await this.workers.current(signal, counter);
    const version = await this.reads.version(signal, counter);
    if (this.version !== undefined && version !== this.version) this.foreignWrites++;
    this.version = version;
    return `${generation}:${this.foreignWrites}`;
  }

  async read(signal: AbortSignal): Promise<RawRead> {
    await this.ready(signal);
    try {
      await this.queue.catch(() => {});
      const counter = { requests: 0 };
      const revision = await this.revisionNow(signal, counter);
      const config = await this.reads.read(signal, counter);
      const raw = await this.withSlots(config.state(), signal, counter);
      const running = await withRunning(
        this.client,
        raw,
        this.workers.runtimeServers !== false,
        this.known,
        signal,
        counter,
      );
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
    const drift = this.drift ?? { backends: new Set(), maps: new Set() };
    this.drift = undefined;
    const owned = new Set(reading.state.frontends.filter((f) => f.owned).map((f) => f.sniMap));
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
   * with one reload, files first; if HAProxy then does not run them (it is not started with a second `-f`
   * naming the storage directory), they are put back and the service refuses with the fix.
   */
  private async relocateSlots(reading: Reading): Promise<void> {
    const slots = this.slots;
    const config = this.reads.current;
    if (!slots || !config) return;
    const inConfig = new Set(config.state().backends.map((b) => b.name));
    const moving = new Set([...fileBackendNames(reading.state)].filter((n) => inConfig.has(n)));
    if (moving.size === 0) return;
    await this.serialized(async () => {
      const counter = { requests: 0 };
      const signal = AbortSignal.timeout(this.o.reloadTimeoutMs + this.o.timeoutMs * 4);
      const pending = this.persistence.take();
      const write = {
        target: reading.state,
        frontends: new Set<string>(),
        backends: moving,
        maps: pending.maps,
      };
      await this.files.write(
        { ...write, draining: this.draining, reload: true, relocate: true },
        signal,
        counter,
      );
      const [first] = moving;
      if (first !== undefined && (await this.runs(first, signal, counter)) === false) {
        await putBack(this.files, slots, reading.state, moving, signal, counter);
        throw this.notLoaded(slots);
      }
      this.version = this.reads.current?.version;
      this.o.logger.info(
        { backends: moving.size },
        'slot backends moved from the configuration to the slots files (one reload)',
      );
    });
  }

  /** Refuses, with the fix, when HAProxy did not load the slots files with the reload just made. */
  private async ensureSlotsLoaded(
    target: HaproxyState,
    signal: AbortSignal,
    counter: Counter,
  ): Promise<void> {
    const slots = this.slots;
    const [first] = slots?.current?.keys() ?? [];
    if (!slots || first === undefined || !target.backends.some((b) => b.name === first)) return;
    if ((await this.runs(first, signal, counter)) === false) throw this.notLoaded(slots);
  }

  private notLoaded(slots: SlotsFile): TerminalError {
    return new TerminalError(
      `HAProxy does not load the slots files (${slots.fileName(0)}, ...): start it with a second -f naming ` +
        "the Data Plane API's general storage directory (its resources.general_storage_dir), or set " +
        'KUBEBYON_DATAPLANE_SLOTS=config',
    );
  }

  /**
   * Whether HAProxy runs backend `name`: undefined when unknown (HAProxy 2.6, whose runtime reads through the
   * API answer nothing usable). An unknown backend is answered `no data for <name>: not found` (404 on
   * v3.4, 500 on v3.0.23); an empty one `[]`.
   */
  private async runs(name: string, signal: AbortSignal, counter: Counter): Promise<boolean | undefined> {
    if (this.workers.runtimeServers === false) return undefined;
    counter.requests++;
    try {
      await this.client.GET('/services/haproxy/runtime/backends/{parent_name}/servers', {
        params: { path: { parent_name: name } },
        signal,
      });
      return true;
    } catch (err) {
      if (err instanceof DataplaneHttpError && /^no data for .*not found/.test(err.apiMessage)) return false;
      throw err;
    }
  }

  async apply(plan: Plan, change: Change, signal: AbortSignal): Promise<ApplyReport> {
    signal.throwIfAborted();
    if (plan.operations.length === 0) return { reload: 'none', requests: 0 };
    await this.ready(signal);
    for (const op of plan.operations)
      if (op.kind === 'create_frontend' || op.kind === 'update_frontend')
        this.names.learn(op.frontend.sniMap);
    return this.serialized(async () => {
      const counter = { requests: 0 };
      try {
        if ((await this.revisionNow(signal, counter)) !== change.revision)
          throw new ConcurrentChangeError('HAProxy or its configuration changed since the plan was made');
        const path = choosePath(plan, change.from, {
          runtimeServers: this.workers.runtimeServers,
          busy: this.busy,
          maxRuntimeRequests: this.slots ? RUNTIME_MAX_REQUESTS : undefined,
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
      const { draining, busy } = await applyRuntimeOps(this.client, path.steps, signal, counter);
      for (const key of draining) this.draining.add(key);
      if (busy.length > 0) {
        // Those servers still run at their old address: the next pass moves them in place.
        for (const key of busy) this.busy.add(key);
        throw new ConcurrentChangeError(
          `moved servers carry streams (${busy.join(', ')}): moved in place instead`,
        );
      }
      this.persistence.schedule(target, touched.backends, touched.maps);
      // A server left draining still runs: the next pass reads what runs and deletes it once it can.
      return {
        reload: 'none',
        requests: counter.requests,
        ...(draining.length > 0 ? {} : { revision: change.revision }),
      };
    }
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
    this.version = this.reads.current?.version;
    if (path.kind === 'reload') await this.ensureSlotsLoaded(target, signal, counter);
    const revision = await this.revisionNow(signal, counter);
    return { reload: path.kind === 'reload' ? 'succeeded' : 'none', requests: counter.requests, revision };
  }

  /** `raw` (the configuration as read) with the slot files' backends, when they live there. */
  private async withSlots(raw: RawState, signal: AbortSignal, counter: Counter): Promise<RawState> {
    if (!this.slots) return raw;
    const file = await this.slots.backends(signal, counter, true);
    if (file.size === 0) return raw;
    const inConfig = new Set(raw.backends.map((b) => b.name));
    const backends = [...raw.backends, ...[...file.values()].filter((b) => !inConfig.has(b.name))];
    return { ...raw, backends: backends.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0)) };
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
    await this.queue.catch(() => {});
    this.client.close();
  }

  private serialized<T>(job: () => Promise<T>): Promise<T> {
    const run = this.queue.then(job, job);
    this.queue = run.catch(() => {});
    return run;
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
}

/** The slots' servers and the maps runtime steps changed. */
function touchedBy(steps: Extract<Path, { kind: 'runtime' }>['steps']): {
  backends: Set<string>;
  maps: Set<string>;
} {
  const out = { backends: new Set<string>(), maps: new Set<string>() };
  for (const op of steps) {
    if (op.kind === 'set_map_entry' || op.kind === 'delete_map_entry') out.maps.add(op.map);
    else out.backends.add(op.backend);
  }
  return out;
}

/**
 * The owned frontends, backends and maps a change makes other (created, changed or deleted): a reading's
 * objects are kept as they are by `applyOperations` unless an operation changes them.
 */
function changedSections(change: Change): {
  frontends: Set<string>;
  backends: Set<string>;
  maps: Set<string>;
} {
  const { from, to } = change;
  const out = { frontends: new Set<string>(), backends: new Set<string>(), maps: new Set<string>() };
  for (const f of to.state.frontends) if (f.owned && from.frontend(f.name) !== f) out.frontends.add(f.name);
  for (const f of from.state.frontends) if (f.owned && !to.frontend(f.name)) out.frontends.add(f.name);
  for (const b of to.state.backends) if (b.owned && from.backend(b.name) !== b) out.backends.add(b.name);
  for (const b of from.state.backends) if (b.owned && !to.backend(b.name)) out.backends.add(b.name);
  const before = new Map((from.state.maps ?? []).map((m) => [m.name, m.entries]));
  for (const m of to.state.maps ?? []) if (before.get(m.name) !== m.entries) out.maps.add(m.name);
  return out;
}

/** The ownership mechanism, in words, for the start log. */
function describeCapabilities(caps: Capabilities): string {
  return caps.ownership === 'metadata'
    ? `ownership tags in \`metadata\` on every object (OpenAPI document ${caps.document})`
    : `ownership tags in the \`description\` of frontends and backends, ${
        caps.serverTags ? 'in `metadata` on servers' : 'servers owned through their backend'
      } (OpenAPI document ${caps.document})`;
}
