import { ALLOW_VALUE, isAllowKey } from '../../haproxy/allow-keys.js';
import { CowMap } from '../../haproxy/cow-map.js';
import { lowerBound } from '../../model/sorted.js';
import { checkedHost, checkedName } from './checked.js';
import { type DataplaneClient, DataplaneHttpError, type TextChunks } from './client.js';
import { storageName } from './map-names.js';
import type { Counter } from './reload.js';

/** SNI map files in the API's storage (`map-names.ts` says how the API names them). */

const byKey = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);

/** An entry's line: an allow map's key (`edge.ts`), or an SNI map's host and backend, checked. */
function lineOf(key: string, value: string): string {
  return isAllowKey(key) && value === ALLOW_VALUE
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
    const res = await this.client.upload(
      '/services/haproxy/storage/maps',
      {
        field: 'file_upload',
        name,
        content: typeof content === 'object' ? Buffer.concat(content).toString() : (content ?? ''),
      },
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

/** A map's text as a body: the API refuses an empty one (400 "value is required"), so a comment line. */
function bodyOf(content: string | readonly Buffer[]): string | TextChunks {
  if (typeof content === 'string') return content === '' ? EMPTY_MAP : content;
  const [first, ...rest] = content.filter((b) => b.length > 0);
  return first ? [first, ...rest] : EMPTY_MAP;
}
