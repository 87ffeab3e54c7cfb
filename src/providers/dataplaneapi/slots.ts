import { setImmediate } from 'node:timers/promises';
import type { HaproxyState, RawBackend, RawServer } from '../../haproxy/model.js';
import { checkedName } from './checked.js';
import { type DataplaneClient, DataplaneHttpError } from './client.js';
import { backendLines, lineTagsFor, readConfigText, type SlotGuards } from './config-text.js';
import type { Counter } from './reload.js';

/**
 * Map routing's slot backends in files of the API's general storage (`KUBEBYON_DATAPLANE_SLOTS=storage`)
 * instead of the configuration file the API parses. HAProxy loads them with a second `-f` (the storage
 * directory: every `*.cfg` in it), the API never parses them: persisting what runs costs a write of the files
 * its changes touch (the configuration's raw push costs the API a parse of every slot, seconds at 20000), a
 * new slot or a burst of servers costs those writes and one reload. Only backends that no frontend names
 * (reached through the SNI map alone) live here, so the configuration the API validates never names one.
 * (Over 300 lines: the files' text, their shards and their storage I/O, read and written together.)
 */

/** How tags are written in the file, whatever the API version: a JSON comment on the line. */
const LINES = lineTagsFor({ ownership: 'metadata', serverTags: true });
const HEAD =
  '# Written by kubebyon-haproxy-adapter through the Data Plane API. Do not edit: it is rewritten.';

/**
 * The files' common name for an owner (`<name>_000.cfg`, ...; the storage keeps `[A-Za-z0-9_-]` and the
 * extension).
 */
export function slotsFileName(ownerId: string): string {
  return `${ownerId.replace(/[^A-Za-z0-9_-]/g, '_')}_slots`;
}

/**
 * Each backend's section as text, kept with the server list it was made from: a write at 20000 slots
 * renders the few backends that changed, not 28000 (115 ms on the event loop when all were rendered).
 * Backends of a state are never changed in place, but a read replaces a fresh copy's list before handing
 * the state out: the list's identity is checked too.
 */
const sections = new WeakMap<RawBackend, { servers: readonly RawServer[]; text: string }>();

function sectionOf(b: RawBackend, guards?: SlotGuards): string {
  const kept = sections.get(b);
  if (kept && kept.servers === b.servers) return kept.text;
  const text = backendLines(b, LINES, guards).join('\n');
  sections.set(b, { servers: b.servers, text });
  return text;
}

/**
 * Renders the sections of `backends` not rendered yet, giving the event loop back between batches. After a
 * full read every backend is a new object: the first persistence would otherwise render all of them in one
 * go (137 ms on the event loop at 20000 slots, which the change that came meanwhile waited for: the
 * endpoint-move p99 of `bench/zero-reload.ts`).
 */
export async function renderAhead(backends: Iterable<RawBackend>, guards?: SlotGuards): Promise<void> {
  let n = 0;
  for (const b of backends) {
    sectionOf(b, guards);
    if (++n % 1000 === 0) await setImmediate();
  }
}

/** `b` without the servers left draining (`backend/server`): they stay out of the files. */
export function withoutDraining<B extends RawBackend>(b: B, draining: ReadonlySet<string>): B {
  if (draining.size === 0 || !b.servers.some((s) => draining.has(`${b.name}/${s.name}`))) return b;
  return { ...b, servers: b.servers.filter((s) => !draining.has(`${b.name}/${s.name}`)) };
}

/** Backends in name order, as the files hold them and a state lists them. */
export const byName = (a: RawBackend, b: RawBackend) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0);

function sortedByName(backends: readonly RawBackend[]): readonly RawBackend[] {
  for (let i = 1; i < backends.length; i++)
    if (byName(backends[i - 1] as RawBackend, backends[i] as RawBackend) > 0)
      return [...backends].sort(byName);
  return backends;
}

/** The file's text: the backends in name order, each as the configuration would hold it. Pure. */
export function renderSlots(backends: readonly RawBackend[], guards?: SlotGuards): string {
  const list = sortedByName(backends);
  if (list.length === 0) return `${HEAD}\n`;
  return `${HEAD}\n\n${list.map((b) => sectionOf(b, guards)).join('\n\n')}\n`;
}

/**
 * The backends of a file `renderSlots` wrote (a line of another shape is skipped), a slot's guard read for
 * the owner's `allowMap`. Pure.
 */
export function parseSlots(text: string, allowMap = ''): RawBackend[] {
  return [...readConfigText(text, (file) => file, allowMap).backends];
}

/**
 * The backends of `state` that belong in the files: ours, and named by no frontend's rule, default or
 * guard (the refusals table's backend: `edge.ts`); the map alone routes to them. Pure.
 */
export function fileBackendNames(state: HaproxyState): Set<string> {
  const named = namedBackends(state);
  const out = new Set<string>();
  for (const b of state.backends) if (b.owned && !named.has(b.name)) out.add(b.name);
  return out;
}

/** The backends a frontend of `state` names: by a rule, as its default, or as its guard's table. Pure. */
export function namedBackends(state: HaproxyState): Set<string> {
  return new Set(
    state.frontends.flatMap((f) => [
      ...f.rules.map((r) => r.backend),
      f.defaultBackend ?? '',
      f.edge?.refusals ?? '',
    ]),
  );
}

/** Backends per file: a change at 20000 slots writes one file of about 50 KB, not 5.8 MB of them all. */
export const SHARD_SIZE = 256;

/** Backends by the file they live in, each file's in the order given. */
function shardsOf(backends: Iterable<RawBackend>): Map<number, Map<string, RawBackend>> {
  const out = new Map<number, Map<string, RawBackend>>();
  for (const b of backends) {
    const k = shardOf(b.name);
    const shard = out.get(k);
    if (shard) shard.set(b.name, b);
    else out.set(k, new Map([[b.name, b]]));
  }
  return out;
}

/** The file a backend lives in: slot `n` in file `floor((n - 1) / SHARD_SIZE)`; a name without a number in 0. */
export function shardOf(name: string): number {
  const n = /(\d+)$/.exec(name)?.[1];
  return n === undefined ? 0 : Math.floor(Math.max(0, Number(n) - 1) / SHARD_SIZE);
}

/**
 * The files in the API's storage (`<base>_000.cfg`, `<base>_001.cfg`, ...), as last read or written: the
 * service is their only writer. One file per `SHARD_SIZE` slots, so that persisting a change (the servers
 * of a few slots) uploads the files those slots are in, and the API writes them, in a few milliseconds at
 * any N: one file of every slot was 5.8 MB at 20000 clusters, and its upload, behind each change, held
 * the API (and a move waiting on it) for up to 290 ms.
 */
export class SlotsFile {
  private held:
    | {
        texts: Map<number, string>;
        /** Each file's backends, in name order; and all of them by name. */
        shards: Map<number, Map<string, RawBackend>>;
        backends: Map<string, RawBackend>;
      }
    | undefined;
  /** The files in the storage (a write then replaces one rather than creating it); unknown before a read. */
  private stored: Set<number> | undefined;

  constructor(
    private readonly client: DataplaneClient,
    /** The files' common name (`slotsFileName`). */
    readonly name: string,
    /** Longest a write with a reload may take. */
    private readonly reloadTimeoutMs: number,
    /** The slots' guards: the owner's allow map, and where each slot's map is stored. */
    private readonly guards?: SlotGuards,
  ) {
    checkedName(name, 'slots file');
  }

  /** The storage name of file `k`. */
  fileName(k: number): string {
    return `${this.name}_${String(k).padStart(3, '0')}.cfg`;
  }

  /** The backends in the files (none when there are none): as last written, or read again when `fresh`. */
  async backends(signal: AbortSignal, counter: Counter, fresh = false): Promise<Map<string, RawBackend>> {
    if (this.held && !fresh) return this.held.backends;
    counter.requests++;
    const list = await this.client.GET('/services/haproxy/storage/general', { signal });
    const mine = new RegExp(`^${this.name}_(\\d{3})\\.cfg$`);
    const shards = ((list.data ?? []) as Array<{ storage_name?: string }>).flatMap((f) => {
      const k = mine.exec(f.storage_name ?? '')?.[1];
      return k === undefined ? [] : [Number(k)];
    });
    const texts = new Map<number, string>();
    await Promise.all(
      shards.map(async (k) => {
        counter.requests++;
        try {
          const res = await this.client.GET('/services/haproxy/storage/general/{name}', {
            params: { path: { name: this.fileName(k) } },
            signal,
            text: true,
          });
          const text: unknown = res.data;
          // Asked for as a file: v3.0.23 and v3.2.15 answer `{}` as JSON to a JSON-first `Accept`.
          if (typeof text !== 'string' || String(res.headers['content-type'] ?? '').includes('json'))
            throw new Error(`the Data Plane API did not answer the text of ${this.fileName(k)}`);
          texts.set(k, text);
        } catch (err) {
          // Deleted between the list and the read: as if it were not there.
          if (!(err instanceof DataplaneHttpError && err.status === 404)) throw err;
        }
      }),
    );
    this.stored = new Set(texts.keys());
    // A file with the text held (the service is the only writer) is not parsed again.
    const backends = new Map<string, RawBackend>();
    const held = this.held;
    for (const k of [...texts.keys()].sort((a, b) => a - b)) {
      const text = texts.get(k) as string;
      const same = held?.texts.get(k) === text;
      for (const b of same
        ? [...(held as NonNullable<typeof held>).backends.values()].filter((x) => shardOf(x.name) === k)
        : parseSlots(text, this.guards?.allowMap))
        backends.set(b.name, b);
    }
    this.held = { texts, shards: shardsOf(backends.values()), backends };
    return backends;
  }

  /** The backends held, if read or written since the start. */
  get current(): ReadonlyMap<string, RawBackend> | undefined {
    return this.held?.backends;
  }

  /**
   * Writes `backends` as the files: each file whose text changes (`always`: each file, or the first one
   * when there are none). `reload`: `skip` leaves them for the next reload (someone's, or a commit right
   * after), `force` reloads HAProxy with the last file sent, before the API answers. Resolves whether any
   * file was sent.
   */
  async write(
    backends: Iterable<RawBackend>,
    reload: 'skip' | 'force',
    signal: AbortSignal,
    counter: Counter,
    always = false,
  ): Promise<boolean> {
    const list = sortedByName([...backends]);
    if (this.stored === undefined) await this.backends(signal, counter, true);
    const byShard = new Map<number, RawBackend[]>();
    for (const b of list) {
      const k = shardOf(b.name);
      const shard = byShard.get(k);
      if (shard) shard.push(b);
      else byShard.set(k, [b]);
    }
    // A file whose backends all went is written empty, not deleted: HAProxy may still be running them.
    for (const k of this.held?.texts.keys() ?? []) if (!byShard.has(k)) byShard.set(k, []);
    if (byShard.size === 0) byShard.set(0, []);
    const texts = new Map<number, string>();
    const changed: number[] = [];
    for (const [k, shard] of [...byShard].sort(([a], [b]) => a - b)) {
      const text = renderSlots(shard, this.guards);
      texts.set(k, text);
      if (always || this.held?.texts.get(k) !== text || !this.stored?.has(k)) changed.push(k);
    }
    for (let i = 0; i < changed.length; i++) {
      const k = changed[i] as number;
      const last = i === changed.length - 1;
      await this.sendOne(k, texts.get(k) as string, last ? reload : 'skip', signal, counter);
    }
    // Held as given, in name order: backends of a state are not changed in place.
    this.held = { texts, shards: shardsOf(list), backends: new Map(list.map((b) => [b.name, b])) };
    return changed.length > 0;
  }

  /**
   * Writes the backends of `names` as `backendOf` gives them (undefined: not in the files) to the files they
   * live in, without the servers left `draining`, rendering and sending only those files: persisting a few changes at 20000 slots renders a few files
   * of 80, not every one (about 50 ms on the event loop each time, which a change arriving then waited
   * for). Undefined when nothing is held yet: the caller writes all (`write`). Resolves whether a file was
   * sent.
   */
  async update(
    names: Iterable<string>,
    backendOf: (name: string) => RawBackend | undefined,
    draining: ReadonlySet<string>,
    signal: AbortSignal,
    counter: Counter,
  ): Promise<boolean | undefined> {
    const held = this.held;
    const stored = this.stored;
    if (!held || !stored) return undefined;
    const dirty = new Map<number, string[]>();
    for (const name of names) {
      const k = shardOf(name);
      const list = dirty.get(k);
      if (list) list.push(name);
      else dirty.set(k, [name]);
    }
    let sent = false;
    for (const [k, list] of [...dirty].sort(([a], [b]) => a - b)) {
      const shard = new Map(held.shards.get(k));
      for (const name of list) {
        const b = backendOf(name);
        if (b) shard.set(name, b);
        else shard.delete(name);
      }
      const sorted = sortedByName([...shard.values()].map((b) => withoutDraining(b, draining)));
      const text = renderSlots(sorted, this.guards);
      if (text !== held.texts.get(k) || !stored.has(k)) {
        await this.sendOne(k, text, 'skip', signal, counter);
        sent = true;
      }
      held.texts.set(k, text);
      held.shards.set(k, new Map(sorted.map((b) => [b.name, b])));
      for (const name of list) {
        const b = shard.get(name);
        if (b) held.backends.set(name, b);
        else held.backends.delete(name);
      }
    }
    return sent;
  }

  /**
   * After a read, the state's backends stand for the ones parsed from the files (the same sections, or the
   * servers that run, which a persistence writes next): one copy of each is kept, not two.
   */
  adopt(backends: Iterable<RawBackend>): void {
    const held = this.held;
    if (!held) return;
    for (const b of backends) {
      if (!held.backends.has(b.name)) continue;
      held.backends.set(b.name, b);
      held.shards.get(shardOf(b.name))?.set(b.name, b);
    }
  }

  private async sendOne(
    k: number,
    text: string,
    reload: 'skip' | 'force',
    signal: AbortSignal,
    counter: Counter,
  ) {
    try {
      await this.send(k, text, reload, signal, counter);
    } catch (err) {
      // Deleted by someone since: created again.
      if (!(err instanceof DataplaneHttpError && err.status === 404 && this.stored?.has(k))) throw err;
      this.stored?.delete(k);
      await this.send(k, text, reload, signal, counter);
    }
  }

  private async send(
    k: number,
    text: string,
    reload: 'skip' | 'force',
    signal: AbortSignal,
    counter: Counter,
  ) {
    const name = this.fileName(k);
    const file = { field: 'file_upload', name, content: text };
    const created = !this.stored?.has(k);
    if (created) {
      // Created as it is; a reload asked for is the replace's below (creating one never reloads).
      counter.requests++;
      await this.client.upload('/services/haproxy/storage/general', file, { signal });
      this.stored?.add(k);
    }
    if (!created || reload === 'force') {
      counter.requests++;
      await this.client.upload('/services/haproxy/storage/general/{name}', file, {
        signal,
        method: 'put',
        params: {
          path: { name },
          query: reload === 'force' ? { force_reload: true } : { skip_reload: true },
        },
        ...(reload === 'force' ? { timeoutMs: this.reloadTimeoutMs } : {}),
      });
    }
  }

  /** Whether `name` is a backend of the files. */
  has(name: string): boolean {
    return this.held?.backends.has(name) ?? false;
  }

  /** Forgets what the files hold: the next read asks the API. */
  forget(): void {
    this.held = undefined;
    this.stored = undefined;
  }
}
