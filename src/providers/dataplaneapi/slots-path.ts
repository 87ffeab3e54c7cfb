import type { Logger } from 'pino';
import type { Owner, RawBackend, RawServer, RawState } from '../../haproxy/model.js';
import { TerminalError } from '../../model/errors.js';
import { applyOperations } from '../../plan/apply.js';
import { backendNamed } from '../../plan/lineage.js';
import type { Plan } from '../../plan/plan.js';
import type { Capabilities } from './capability.js';
import { type DataplaneClient, DataplaneHttpError } from './client.js';
import type { MapState } from './map-state.js';
import { checkedPort, checkedServerAddress, type Snapshot } from './mapping.js';
import type { ServerUpdate, WritePlan } from './objects.js';
import type { Applied, Counter } from './options.js';
import type { Persistence } from './persist.js';
import type { Reads } from './read.js';
import type { Reloads } from './reload.js';
import { byName, fileBackendNames, SlotsFile, slotsFileName } from './slots-file.js';
import { planWrites } from './writes.js';

export interface SlotsPathDeps {
  client: DataplaneClient;
  owner: Owner;
  logger: Logger;
  timeoutMs: number;
  reloadTimeoutMs: number;
  reads: Reads;
  maps: MapState;
  reloads: Reloads;
  persistence: () => Persistence;
  capabilities: () => Capabilities;
  /** The configuration's writes, by the provider's own path for them. */
  send(
    plan: Plan,
    work: Exclude<WritePlan, { kind: 'none' }>,
    snapshot: Snapshot,
    signal: AbortSignal,
    counter: Counter,
  ): Promise<Applied>;
}

/**
 * The provider's side of `slots: 'storage'` (`slots-file.ts` says why): reads complete the configuration
 * with the file's backends, plans split between the file and the configuration, writes of the file with or
 * without a reload, persistence's share for it, and the move of an install's slots out of the configuration.
 */
export class SlotsPath {
  readonly file: SlotsFile;

  constructor(private readonly d: SlotsPathDeps) {
    this.file = new SlotsFile(d.client, slotsFileName(d.owner.id), d.reloadTimeoutMs + d.timeoutMs);
  }

  /**
   * `raw` (the configuration as read) with the file's backends, when there is one. The file is read again
   * each time (a state kept between passes is not rebuilt): whoever reloaded or changed the configuration
   * may have changed it too. A new state object, registered with the snapshot it came from.
   */
  async withSlots(
    raw: RawState,
    snapshot: Snapshot,
    signal: AbortSignal,
    counter: Counter,
  ): Promise<RawState> {
    const file = await this.file.backends(signal, counter, true);
    if (file.size === 0) return raw;
    // Shallow copies: a read completes servers by replacing a backend's list, never by changing it.
    const backends = [...raw.backends, ...[...file.values()].map((b) => ({ ...b }))].sort(byName);
    const merged = { ...raw, backends };
    this.d.reads.register(merged, snapshot);
    return merged;
  }

  /**
   * The upgrade to `slots: 'storage'`: slot backends found in the configuration move to the file, with one
   * reload. The file is written first without a reload, then the configuration without them with one: a
   * reload by someone else in between finds each backend twice and fails (HAProxy keeps running what it
   * ran), never none of them. Servers added at runtime reach the configuration first, so they move too.
   */
  async moveOut(snapshot: Snapshot, signal: AbortSignal, counter: Counter): Promise<Snapshot> {
    const inConfig = this.d.reads.handOutFrom(snapshot);
    const names = fileBackendNames(inConfig, this.d.owner);
    if (names.size === 0) return snapshot;
    const persistence = this.d.persistence();
    if (persistence.isPending) {
      await persistence.flush();
      return this.moveOut(await this.d.reads.read(signal), signal, counter);
    }
    const file = new Map(await this.file.backends(signal, counter, true));
    for (const b of inConfig.backends) if (names.has(b.name)) file.set(b.name, b);
    await this.file.write(file.values(), 'skip', signal, counter);
    const plan: Plan = {
      operations: [...names].map((name) => ({ kind: 'delete_backend' as const, name })),
      conflicts: [],
    };
    const work = planWrites(plan, snapshot, {
      runtimeMaxServers: 0,
      owner: this.d.owner,
      tags: this.d.capabilities(),
    });
    if (work.kind !== 'transaction') return snapshot;
    this.d.maps.forget();
    this.d.reads.forget();
    await this.d.send(plan, work, snapshot, signal, counter);
    const moved = inConfig.backends.filter((b) => names.has(b.name));
    if ((await this.runs(moved[0]?.name, signal, counter)) === false) {
      await this.putBack(moved, file, signal, counter);
      throw this.notLoaded();
    }
    this.d.logger.info(
      { backends: names.size, file: this.file.name },
      'slot backends moved from the configuration to the slots file (one reload)',
    );
    return this.d.reads.read(signal);
  }

  /**
   * The plan's part for the file (the file's backends after the plan, when the plan changes any; and the
   * endpoint moves, when that is all it does there) and the rest for the configuration. A backend is the
   * file's when it is there already, or when it is new, ours and named by no frontend after the plan.
   */
  split(plan: Plan, current: RawState): { file?: RawBackend[]; config: Plan; moves?: ServerUpdate[] } {
    const target = applyOperations(current, plan.operations, this.d.owner);
    const unnamed = fileBackendNames(target, this.d.owner);
    const inFile = (name: string) =>
      this.file.has(name) || (unnamed.has(name) && backendNamed(current, name) === undefined);
    const config: Plan['operations'] = [];
    let touched = false;
    let moves: ServerUpdate[] | undefined = [];
    for (const op of plan.operations) {
      const backend =
        op.kind === 'create_backend' || op.kind === 'update_backend'
          ? op.backend.name
          : op.kind === 'delete_backend'
            ? op.name
            : op.kind === 'create_server' || op.kind === 'update_server' || op.kind === 'delete_server'
              ? op.backend
              : undefined;
      if (backend === undefined || !inFile(backend)) {
        config.push(op);
        continue;
      }
      touched = true;
      if (op.kind !== 'update_server') moves = undefined;
      else
        moves?.push({
          backend: op.backend,
          server: op.server.name,
          body: {
            name: op.server.name,
            address: checkedServerAddress(op.server.address),
            port: checkedPort(op.server.port, 'server'),
          },
        });
    }
    if (!touched) return { config: plan };
    const file = target.backends.filter((b) => inFile(b.name) && this.d.owner.owns(b.tags));
    return { file, config: { ...plan, operations: config }, ...(moves ? { moves } : {}) };
  }

  /**
   * The file as `backends`; with `force`, loaded by a reload verified by HAProxy's new workers (`always`:
   * even when the file holds that text already). Resolves whether HAProxy was reloaded.
   */
  async write(
    backends: RawBackend[],
    reload: 'skip' | 'force',
    signal: AbortSignal,
    counter: Counter,
    always = false,
  ): Promise<boolean> {
    this.d.maps.forget();
    if (reload === 'skip') {
      await this.file.write(backends, 'skip', signal, counter);
      return false;
    }
    counter.requests++;
    const before = await this.d.reloads.settledWorkerPid(signal);
    try {
      // Ours: the revision watch must not take it for someone else's (a fresh read of every slot).
      const { result: sent, pid } = await this.d.maps.ourReload(
        signal,
        counter,
        async () => {
          if (!(await this.file.write(backends, 'force', signal, counter, always))) return false;
          await this.d.reloads.awaitNewWorkers(before, counter);
          return true;
        },
        (reloaded) => reloaded,
      );
      this.worker = pid;
      if (sent) await this.ensureLoaded(backends, signal, counter);
      return sent;
    } catch (err) {
      // Whether it was written or loaded is unknown: the next pass reads the file and HAProxy again.
      this.file.forget();
      this.worker = undefined;
      throw err;
    }
  }

  /** HAProxy's worker after the last reload of ours (`write` with `force`). */
  worker: number | undefined;

  /**
   * Whether HAProxy runs backend `name` (a slot of the files just loaded): undefined when unknown (no name;
   * HAProxy 2.6, whose runtime reads through the API answer nothing usable). An unknown backend is answered
   * `no data for <name>: not found` (404 on v3.4, 500 on v3.0.23); an empty one `[]`.
   */
  private async runs(
    name: string | undefined,
    signal: AbortSignal,
    counter: Counter,
  ): Promise<boolean | undefined> {
    if (name === undefined) return undefined;
    if (this.d.maps.runtimeServers === undefined) await this.d.maps.worker(signal, counter);
    if (this.d.maps.runtimeServers === false) return undefined;
    counter.requests++;
    try {
      await this.d.client.GET('/services/haproxy/runtime/backends/{parent_name}/servers', {
        params: { path: { parent_name: name } },
        signal,
      });
      return true;
    } catch (err) {
      if (err instanceof DataplaneHttpError && /^no data for .*not found/.test(err.apiMessage)) return false;
      throw err;
    }
  }

  /** Refuses, with the fix, when HAProxy did not load the files with its last reload. */
  async ensureLoaded(backends: readonly RawBackend[], signal: AbortSignal, counter: Counter): Promise<void> {
    if ((await this.runs(backends[0]?.name, signal, counter)) === false) throw this.notLoaded();
  }

  private notLoaded(): TerminalError {
    return new TerminalError(
      `HAProxy does not load the slots files (${this.file.fileName(0)}, ...): start it with a second -f naming ` +
        "the Data Plane API's general storage directory (its resources.general_storage_dir), or set " +
        'KUBEBYON_DATAPLANE_SLOTS=config',
    );
  }

  /**
   * The move out undone (HAProxy does not load the files): the backends out of the files first (written
   * without a reload, so that a later `-f` finds no name twice), then back into the configuration, reloaded.
   */
  private async putBack(
    moved: RawBackend[],
    file: Map<string, RawBackend>,
    signal: AbortSignal,
    counter: Counter,
  ): Promise<void> {
    for (const b of moved) file.delete(b.name);
    await this.file.write(file.values(), 'skip', signal, counter);
    const plan: Plan = {
      operations: moved.flatMap((b) => [
        { kind: 'create_backend' as const, backend: { name: b.name, balance: b.balance } },
        ...b.servers.map((s) => ({
          kind: 'create_server' as const,
          backend: b.name,
          server: { name: s.name, address: s.address, port: s.port, check: s.check, owned: true },
        })),
      ]),
      conflicts: [],
    };
    const snapshot = await this.d.reads.read(signal);
    const work = planWrites(plan, snapshot, {
      runtimeMaxServers: 0,
      owner: this.d.owner,
      tags: this.d.capabilities(),
    });
    if (work.kind === 'transaction') await this.d.send(plan, work, snapshot, signal, counter);
    this.d.reads.forget();
    this.d.maps.forget();
  }

  /** HAProxy reloaded to load the file as written. */
  async reload(signal: AbortSignal, counter: Counter): Promise<void> {
    const held = this.file.current;
    if (held) await this.write([...held.values()], 'force', signal, counter, true);
  }

  /** Persistence's share: the servers of the file's backends are written there; the rest is answered. */
  async persist(servers: ReadonlyMap<string, RawServer[]>): Promise<ReadonlyMap<string, RawServer[]>> {
    const signal = AbortSignal.timeout(this.d.timeoutMs);
    const counter = { requests: 0 };
    if (!this.file.current) await this.file.backends(signal, counter);
    const mine = new Map<string, RawServer[]>();
    const rest = new Map<string, RawServer[]>();
    for (const [b, list] of servers) (this.file.has(b) ? mine : rest).set(b, list);
    if (mine.size > 0) await this.file.writeServers(mine, signal, counter);
    return rest;
  }
}
