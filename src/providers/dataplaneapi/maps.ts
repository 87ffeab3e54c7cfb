import { dirname } from 'node:path';
import { ALLOW_VALUE, isAllowKey, isAllowNetwork } from '../../haproxy/allow-keys.js';
import { CowMap } from '../../haproxy/cow-map.js';
import { lowerBound } from '../../model/sorted.js';
import { checkedHost, checkedName } from './checked.js';
import { type DataplaneClient, DataplaneHttpError, type TextChunks } from './client.js';
import { storageName } from './map-names.js';
import type { Counter } from './reload.js';

/** SNI map files in the API's storage (`map-names.ts` says how the API names them). */

const byKey = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);

/** An entry's line: an allow map's key or network (`slot-allow.ts`), or an SNI map's host and backend, checked. */
function lineOf(key: string, value: string): string {
  return (isAllowKey(key) || isAllowNetwork(key)) && value === ALLOW_VALUE
    ? `${key} ${value}\n`
    : `${checkedHost(key)} ${checkedName(value, 'backend')}\n`;
}

/** Fewer keys added than this are put in place in the kept order; more sort all keys again. */
const INSERT_MAX = 64;

/** An entry as the text holds it: its value and its line. */
interface Line {
  key: string;
  value: string;
  line: string;
}

/**
 * A map file's text (a `key value` line per entry, in key order, every entry checked), kept between writes:
 * each entry is checked and its line made once, and the order is kept, so a persistence at 20000 clusters
 * follows the few entries that changed (told by `CowMap.changedKeys`, or found by comparing all) rather than
 * checking and sorting all of them again (50-80 ms on the event loop each time, which a change arriving
 * meanwhile waited for: the move and delete p99 of `bench/zero-reload.ts`).
 */
export class MapText {
  private readonly lines = new Map<string, Line>();
  private order: Line[] = [];
  private basis: ReadonlyMap<string, string> | undefined;
  private last = '';

  text(entries: ReadonlyMap<string, string>): string {
    if (entries === this.basis) return this.last;
    try {
      const changed = this.basis && CowMap.changedKeys(this.basis, entries);
      this.follow(entries, changed ?? entries.keys());
      // The keys told must account for every entry; if not, all are compared.
      if (changed && this.lines.size !== entries.size) this.follow(entries, entries.keys());
    } catch (err) {
      // A refused entry leaves nothing half-followed: the next text starts afresh.
      this.lines.clear();
      this.order = [];
      this.basis = undefined;
      throw err;
    }
    this.basis = entries;
    this.last = this.order.map((l) => l.line).join('');
    return this.last;
  }

  /** Brings the lines to `entries`, where only the `keys` may differ from the last ones (or all keys). */
  private follow(entries: ReadonlyMap<string, string>, keys: Iterable<string>): void {
    const added: Line[] = [];
    let removed = false;
    for (const key of keys) {
      const value = entries.get(key);
      const kept = this.lines.get(key);
      if (kept?.value === value) continue;
      if (value === undefined) {
        this.lines.delete(key);
        removed = true;
      } else if (kept) {
        kept.line = lineOf(key, value);
        kept.value = value;
      } else {
        const line = { key, value, line: lineOf(key, value) };
        this.lines.set(key, line);
        added.push(line);
      }
    }
    // Told nothing (a map of its own): keys no longer there are found by their count.
    if (this.lines.size > entries.size)
      for (const key of this.lines.keys())
        if (!entries.has(key)) {
          this.lines.delete(key);
          removed = true;
        }
    if (removed) this.order = this.order.filter((l) => this.lines.get(l.key) === l);
    if (added.length > INSERT_MAX) this.order = [...this.lines.values()].sort((a, b) => byKey(a.key, b.key));
    else
      for (const l of added)
        this.order.splice(
          lowerBound(this.order, (x) => x.key < l.key),
          0,
          l,
        );
  }
}

const EMPTY_MAP = '# no entries\n';
/** Uploads in flight at once: the client's sockets (`client.ts`). */
const WRITERS = 4;

interface StoredMap {
  file?: string;
  storage_name?: string;
}

/**
 * The map files in the API's storage: where each is (its path, for the frontend's rule), created or given
 * new content. Content written here is loaded by the next reload only; the runtime path changes what HAProxy
 * runs through `runtime.ts`, and persistence brings the files in line after.
 */
export class MapFiles {
  private readonly files = new Map<string, string>();
  /** The storage was listed since the last `forget`: a name not in `files` is not stored. */
  private listed = false;
  /** The storage's folder, once any stored map's path is known. */
  private dir: string | undefined;

  constructor(private readonly client: DataplaneClient) {}

  /** The path of the stored map `name` (logical), when it is in the storage. */
  async find(name: string, signal: AbortSignal, counter: Counter): Promise<string | undefined> {
    const stored = storageName(name);
    const known = this.files.get(stored);
    if (known !== undefined || this.listed) return known;
    await this.list(signal, counter);
    return this.files.get(stored);
  }

  /** Lists the storage once (a later `find` of an unknown name asks nothing): where each map is. */
  async list(signal: AbortSignal, counter: Counter): Promise<void> {
    counter.requests++;
    const res = await this.client.GET('/services/haproxy/storage/maps', { signal });
    for (const m of (res.data ?? []) as StoredMap[])
      if (m.storage_name && m.file) this.learn(m.storage_name, m.file);
    this.listed = true;
  }

  /**
   * Where the storage keeps (or will keep) map `name`: beside the maps it holds, under its stored name.
   * Throws while no stored map's path is known (`list` first).
   */
  pathOf(name: string): string {
    const stored = storageName(name);
    const known = this.files.get(stored);
    if (known !== undefined) return known;
    if (this.dir === undefined) throw new Error(`the Data Plane API's map storage folder is not known yet`);
    return `${this.dir}/${stored}`;
  }

  get folderKnown(): boolean {
    return this.dir !== undefined;
  }

  private learn(stored: string, file: string): void {
    this.files.set(stored, file);
    this.dir ??= dirname(file);
  }

  /** `write` of each `[name, content]`, a few at a time (the slots' allow maps: thousands at an upgrade). */
  async writeMany(
    items: ReadonlyArray<readonly [string, string]>,
    signal: AbortSignal,
    counter: Counter,
  ): Promise<void> {
    let next = 0;
    const lane = async () => {
      while (next < items.length) {
        const [name, content] = items[next++] as readonly [string, string];
        await this.write(name, content, signal, counter);
      }
    };
    await Promise.all(Array.from({ length: Math.min(WRITERS, items.length) }, lane));
  }

  /**
   * The map `name` in the storage holding `content` (no reload: the next one loads it), its path returned.
   * `content` undefined: created empty when missing, left as it is otherwise.
   */
  async write(
    name: string,
    content: string | readonly Buffer[] | undefined,
    signal: AbortSignal,
    counter: Counter,
  ): Promise<string> {
    const stored = storageName(name);
    const file = await this.find(name, signal, counter);
    if (file !== undefined) {
      if (content === undefined) return file;
      counter.requests++;
      try {
        await this.client.PUT('/services/haproxy/storage/maps/{name}', {
          params: { path: { name: stored }, query: { skip_reload: true } },
          body: bodyOf(content),
          signal,
        });
        return file;
      } catch (err) {
        // Deleted by someone since it was found: created again below.
        if (!(err instanceof DataplaneHttpError && err.status === 404)) throw err;
        this.files.delete(stored);
      }
    }
    counter.requests++;
    let res: Awaited<ReturnType<DataplaneClient['upload']>>;
    try {
      res = await this.client.upload(
        '/services/haproxy/storage/maps',
        {
          field: 'file_upload',
          name,
          content: typeof content === 'object' ? Buffer.concat(content).toString() : (content ?? ''),
        },
        { signal },
      );
    } catch (err) {
      // Stored since the storage was listed (by a run of ours killed meanwhile): found, then written.
      if (!(err instanceof DataplaneHttpError && err.status === 409)) throw err;
      this.listed = false;
      const file = await this.find(name, signal, counter);
      if (file === undefined) throw err;
      return this.write(name, content, signal, counter);
    }
    const made = res.data as StoredMap | undefined;
    if (!made?.file) throw new Error(`the Data Plane API stored map ${name} without saying where`);
    this.learn(made.storage_name ?? stored, made.file);
    return made.file;
  }

  /** Deletes the stored map `name` when it is there (one of ours nothing names any more). */
  async remove(name: string, signal: AbortSignal, counter: Counter): Promise<void> {
    if ((await this.find(name, signal, counter)) === undefined) return;
    counter.requests++;
    try {
      await this.client.DELETE('/services/haproxy/storage/maps/{name}', {
        params: { path: { name: storageName(name) } },
        signal,
      });
    } catch (err) {
      if (!(err instanceof DataplaneHttpError && err.status === 404)) throw err;
    }
    this.files.delete(storageName(name));
  }

  /** Forgets where maps are (someone may have deleted one). */
  forget(): void {
    this.files.clear();
    this.listed = false;
  }
}

/** A map's text as a body: the API refuses an empty one (400 "value is required"), so a comment line. */
function bodyOf(content: string | readonly Buffer[]): string | TextChunks {
  if (typeof content === 'string') return content === '' ? EMPTY_MAP : content;
  const [first, ...rest] = content.filter((b) => b.length > 0);
  return first ? [first, ...rest] : EMPTY_MAP;
}
