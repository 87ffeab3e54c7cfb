import { ALLOW_VALUE, isAllowKey } from '../../haproxy/allow-keys.js';
import { checkedHost, checkedName } from './checked.js';
import { type DataplaneClient, DataplaneHttpError } from './client.js';
import { storageName } from './map-names.js';
import type { Counter } from './reload.js';

/** SNI map files in the API's storage (`map-names.ts` says how the API names them). */

/** A map file's text: one `key value` line per entry, sorted, every value checked once more. */
export function mapText(entries: ReadonlyMap<string, string>): string {
  const lines = [...entries]
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
    .map(([key, value]) =>
      // An allow map's key (`edge.ts`), or an SNI map's host and backend.
      isAllowKey(key) && value === ALLOW_VALUE
        ? `${key} ${value}\n`
        : `${checkedHost(key)} ${checkedName(value, 'backend')}\n`,
    );
  return lines.join('');
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
