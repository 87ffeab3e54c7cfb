import { ALLOW_VALUE, isAllowKey } from '../../haproxy/allow-keys.js';
import { checkedHost, checkedName } from './checked.js';
import { type DataplaneClient, DataplaneHttpError } from './client.js';
import { storageName } from './map-names.js';
import type { Counter } from './reload.js';

/** SNI map files in the API's storage (`map-names.ts` says how the API names them). */

/** A map file's text: one `key value` line per entry, sorted, every value checked once more. */
export function mapText(entries: ReadonlyMap<string, string>): string {
  return new MapText().text(entries);
}

const byKey = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);

/** An entry's line: an allow map's key (`edge.ts`), or an SNI map's host and backend, checked. */
function lineOf(key: string, value: string): string {
  return isAllowKey(key) && value === ALLOW_VALUE
    ? `${key} ${value}\n`
    : `${checkedHost(key)} ${checkedName(value, 'backend')}\n`;
}

/** Fewer keys added than this are put in place in the kept order; more sort all keys again. */
const INSERT_MAX = 64;

/**
 * One map file's text (`mapText`), kept between writes: each entry is checked and its line made once, and
 * the keys' order is kept, so a persistence at 20000 clusters compares the entries with the last ones
 * rather than checking and sorting all of them again (50-80 ms on the event loop each time, which a change
 * arriving meanwhile waited for: the move and delete p99 of `bench/zero-reload.ts`).
 */
export class MapText {
  private readonly lines = new Map<string, { value: string; line: string }>();
  private order: string[] = [];
  private basis: ReadonlyMap<string, string> | undefined;
  private last = '';

  text(entries: ReadonlyMap<string, string>): string {
    if (entries === this.basis) return this.last;
    try {
      this.follow(entries);
    } catch (err) {
      // A refused entry leaves nothing half-followed: the next text starts afresh.
      this.lines.clear();
      this.order = [];
      this.basis = undefined;
      throw err;
    }
    this.basis = entries;
    this.last = this.order.map((k) => (this.lines.get(k) as { line: string }).line).join('');
    return this.last;
  }

  private follow(entries: ReadonlyMap<string, string>): void {
    const added: string[] = [];
    for (const [key, value] of entries) {
      const kept = this.lines.get(key);
      if (kept?.value === value) continue;
      const line = lineOf(key, value);
      if (!kept) added.push(key);
      this.lines.set(key, { value, line });
    }
    if (this.lines.size > entries.size) {
      for (const key of this.lines.keys()) if (!entries.has(key)) this.lines.delete(key);
      this.order = this.order.filter((k) => this.lines.has(k));
    }
    if (added.length > INSERT_MAX) this.order = [...this.lines.keys()].sort(byKey);
    else for (const key of added) this.order.splice(sortedIndex(this.order, key), 0, key);
  }
}

/** Where `key` goes in the sorted `keys`. */
function sortedIndex(keys: readonly string[], key: string): number {
  let lo = 0;
  let hi = keys.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if ((keys[mid] as string) < key) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** The maps a frontend names: the SNI map it routes by, and its guard's allow map. */
export function mapsOf(f: { sniMap?: string | null; edge?: { allowMap: string } | null }): string[] {
  return [f.sniMap, f.edge?.allowMap].filter((m): m is string => !!m);
}

const EMPTY_MAP = '# no entries\n';

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

  constructor(private readonly client: DataplaneClient) {}

  /** The path of the stored map `name` (logical), when it is in the storage. */
  async find(name: string, signal: AbortSignal, counter: Counter): Promise<string | undefined> {
    const stored = storageName(name);
    const known = this.files.get(stored);
    if (known !== undefined) return known;
    counter.requests++;
    const res = await this.client.GET('/services/haproxy/storage/maps', { signal });
    for (const m of (res.data ?? []) as StoredMap[])
      if (m.storage_name && m.file) this.files.set(m.storage_name, m.file);
    return this.files.get(stored);
  }

  /**
   * The map `name` in the storage holding `content` (no reload: the next one loads it), its path returned.
   * `content` undefined: created empty when missing, left as it is otherwise.
   */
  async write(
    name: string,
    content: string | undefined,
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
          // The API refuses an empty body (400 "value is required"): an empty map is a comment line.
          body: content === '' ? EMPTY_MAP : content,
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
    const res = await this.client.upload(
      '/services/haproxy/storage/maps',
      { field: 'file_upload', name, content: content ?? '' },
      { signal },
    );
    const made = res.data as StoredMap | undefined;
    if (!made?.file) throw new Error(`the Data Plane API stored map ${name} without saying where`);
    this.files.set(made.storage_name ?? stored, made.file);
    return made.file;
  }

  /** Forgets where maps are (someone may have deleted one). */
  forget(): void {
    this.files.clear();
  }
}
