import type { Owner, RawServer, RawState } from '../../haproxy/model.js';
import type { TagStore } from './capability.js';
import type { DataplaneClient } from './client.js';
import type { Snapshot } from './mapping.js';
import type { Counter } from './options.js';
import type { Persistence } from './persist.js';
import { readMapEntries, readRunningServers } from './runtime-reads.js';

/**
 * What HAProxy runs, for map routing: the configuration as read, with the SNI maps' runtime entries and the
 * owned backends' servers as HAProxy runs them (servers added at runtime are in the file only once
 * persisted). Kept between passes while nothing can have changed it behind the service's back: the same
 * configuration version and the same HAProxy worker (`GET /runtime/info`: a reload or restart starts another).
 */
interface View {
  state: RawState;
  pid: number;
  version: number;
  /** The API's objects the state was read from, while they are still the file's. */
  snapshot: Snapshot | undefined;
}

/** A start time read off `uptime` moves by a second or so between reads; more means another process. */
const START_SLACK_S = 3;

export class MapState {
  private view: View | undefined;
  private process: { pid: number; start: number; generation: number } | undefined;
  /**
   * Whether the API can drive runtime servers on this HAProxy: seen working on 3.0; on 2.6 the API adds one
   * (201) but then answers 404 `no data for <backend>/<server>` to every GET, PUT and DELETE of it, so it
   * could never be enabled. Unknown until the first read of the worker.
   */
  runtimeServers: boolean | undefined;

  constructor(
    private readonly client: DataplaneClient,
    private readonly owner: Owner,
    private readonly tags: () => TagStore,
    private readonly persistence: Persistence,
  ) {}

  /** HAProxy's worker pid, and a token that changes whenever another process runs (reload or restart). */
  async worker(signal: AbortSignal, counter: Counter): Promise<{ pid: number; revision: string }> {
    counter.requests++;
    const res = await this.client.GET('/services/haproxy/runtime/info', { signal });
    const info = (Array.isArray(res.data) ? res.data[0] : res.data)?.info;
    const pid = info?.pid ?? 0;
    const major = /^(\d+)\.\d+/.exec(String(info?.version ?? ''))?.[1];
    if (major !== undefined) this.runtimeServers = Number(major) >= 3;
    const start = Math.floor(Date.now() / 1000) - (info?.uptime ?? 0);
    const p = this.process;
    // The same pid in a restarted container is another process: its start time tells.
    if (!p || p.pid !== pid || Math.abs(p.start - start) > START_SLACK_S)
      this.process = { pid, start, generation: (p?.generation ?? 0) + 1 };
    const now = this.process as NonNullable<typeof this.process>;
    return { pid, revision: this.pinned ?? this.ours(`${pid}.${now.generation}`) };
  }

  /** While a reload of ours is under way, the revision it started from (`ourReload`). */
  private pinned: string | undefined;

  /** Revisions our own reloads started, each to the one before it: the watch need not read those again. */
  private readonly own = new Map<string, string>();

  private ours(revision: string): string {
    let r = revision;
    for (let seen = 0; this.own.has(r) && seen < 64; seen++) r = this.own.get(r) as string;
    return r;
  }

  /**
   * Runs `reload`, a reload of ours whose result the service knows: the revision token stays where it was
   * while it runs and after it (`reloaded` says whether it did reload), so that only a reload by someone else
   * moves it and the watch reads nothing again for ours. Resolves its result, and HAProxy's worker after it.
   */
  async ourReload<T>(
    signal: AbortSignal,
    counter: Counter,
    reload: () => Promise<T>,
    reloaded: (result: T) => boolean,
  ): Promise<{ result: T; pid?: number }> {
    const before = (await this.worker(signal, counter)).revision;
    this.pinned = before;
    try {
      const result = await reload();
      if (!reloaded(result)) return { result };
      const { pid } = await this.worker(signal, counter);
      const p = this.process as NonNullable<typeof this.process>;
      const now = `${p.pid}.${p.generation}`;
      if (now !== before) this.own.set(now, before);
      return { result, pid };
    } finally {
      this.pinned = undefined;
    }
  }

  /**
   * The state kept, when the configuration and HAProxy's worker are those it was read or left at. Shared, not
   * copied (a copy costs tens of ms at thousands of slots): a state handed out is never changed in place by
   * anyone (`applyOperations` copies on write), as with the stock provider's cached reads.
   */
  cached(version: number, pid: number): { state: RawState; snapshot: Snapshot | undefined } | undefined {
    const v = this.view;
    if (!v || v.version !== version || v.pid !== pid) return undefined;
    return { state: v.state, snapshot: v.snapshot };
  }

  /**
   * `raw` (the configuration as read) completed with what HAProxy runs: map entries and owned backends'
   * servers. Owned servers running but not in the file, or in the file but not running (a crash before
   * persistence, a reload meanwhile), are scheduled for the file; resolves whether any were.
   */
  async complete(raw: RawState, signal: AbortSignal, counter: Counter): Promise<boolean> {
    const maps = [...new Set(raw.frontends.flatMap((f) => (f.sniMap ? [f.sniMap] : [])))];
    if (maps.length === 0) return false;
    if (this.runtimeServers === false) {
      // HAProxy 2.6: the API's runtime reads answer nothing usable (stats empty, map entries parsed from the
      // master's help text), and every change was written and reloaded: the files are what runs.
      const entries = await Promise.all(
        maps.map((m) => readMapEntries(this.client, m, 'storage', signal, counter)),
      );
      raw.maps = maps.map((name, i) => ({ name, entries: entries[i] as Map<string, string> }));
      return false;
    }
    // What runs, and the map files as stored: those behind what runs (a crash or a reload before
    // persistence) are written like the servers.
    const [running, entries, stored] = await Promise.all([
      readRunningServers(this.client, signal, counter),
      Promise.all(maps.map((m) => readMapEntries(this.client, m, 'runtime', signal, counter))),
      Promise.all(maps.map((m) => readMapEntries(this.client, m, 'storage', signal, counter))),
    ]);
    raw.maps = maps.map((name, i) => ({ name, entries: entries[i] as Map<string, string> }));
    const mapDrift = new Map<string, ReadonlyMap<string, string>>();
    maps.forEach((name, i) => {
      const runs = entries[i] as Map<string, string>;
      if (!sameEntries(runs, stored[i] as Map<string, string>)) mapDrift.set(name, runs);
    });
    const drift = new Map<string, RawServer[]>();
    // A server not in the file yet is as the service's last apply left it (runtime servers carry no check
    // flag or tags of their own).
    const known = new Map(
      (this.view?.state.backends ?? []).flatMap((b) => b.servers.map((s) => [`${b.name}/${s.name}`, s])),
    );
    for (const b of raw.backends) {
      if (!this.owner.owns(b.tags)) continue;
      const inFile = new Map(b.servers.map((s) => [s.name, s]));
      const list = running.get(b.name) ?? [];
      const runs = list.map((s): RawServer => {
        const was = inFile.get(s.name) ?? known.get(`${b.name}/${s.name}`);
        return {
          name: s.name,
          address: s.address,
          port: s.port,
          check: was?.check ?? false,
          tags: was?.tags ?? (this.tags().serverTags ? this.owner.tags() : b.tags),
        };
      });
      // A server in maintenance is draining (a delete waits for its streams): it stays out of the file.
      const serving = runs.filter((_, i) => !list[i]?.maint);
      if (key(serving) !== key(b.servers.filter((s) => !draining(list, s.name)))) drift.set(b.name, serving);
      b.servers = runs;
    }
    this.persistence.schedule(drift, mapDrift);
    return drift.size > 0 || mapDrift.size > 0;
  }

  remember(state: RawState, pid: number, version: number, snapshot: Snapshot | undefined): void {
    this.view = { state, pid, version, snapshot };
  }

  /** A runtime apply of ours ran: HAProxy now runs `state` (same configuration, same worker). */
  applied(state: RawState): void {
    if (this.view) this.view = { ...this.view, state };
  }

  /**
   * The file moved from `from` to `to` by a write of ours that changed servers only: the state kept still
   * holds, with `snapshot` (the objects read, those servers patched in) when known.
   */
  movedTo(from: number | undefined, to: number | undefined, snapshot: Snapshot | undefined): void {
    if (!this.view) return;
    if (to === undefined || from !== this.view.version) this.view = undefined;
    else this.view = { ...this.view, version: to, snapshot };
  }

  forget(): void {
    this.view = undefined;
  }
}

function draining(list: ReadonlyArray<{ name: string; maint: boolean }>, name: string): boolean {
  return list.some((s) => s.name === name && s.maint);
}

function key(servers: ReadonlyArray<{ name: string; address: string; port: number }>): string {
  return servers
    .map((s) => `${s.name}|${s.address}|${s.port}`)
    .sort()
    .join(',');
}

function sameEntries(a: ReadonlyMap<string, string>, b: ReadonlyMap<string, string>): boolean {
  if (a.size !== b.size) return false;
  for (const [k, v] of a) if (b.get(k) !== v) return false;
  return true;
}
