import { basename } from 'node:path';
import { checkedHost, checkedName } from './mapping.js';
import type { DataplaneClient } from './client.js';
import type { Counter } from './options.js';
import { RefusedOperationError } from './objects.js';

/**
 * Map routing in the Data Plane API's terms (`use_backend %[req.ssl_sni,lower,map(<file>)]` and the map file in
 * the API's storage). Checked on v3.0.23, v3.2.15 and v3.4.0 (`test/fixtures/dataplaneapi/versions.md`):
 * - the `use_backend` is a backend switching rule whose `name` is the whole `%[...]` expression and which has
 *   no `cond`; it round-trips as written through `full_section` objects and the raw file;
 * - the storage renames a map on upload: every `.` of the name before `.map` becomes `_`
 *   (`kubebyon-haproxy-adapter.sni.map` is stored as `kubebyon-haproxy-adapter_sni.map`); the runtime map
 *   endpoints take that stored name. The service's name for the map (`RawFrontend.sniMap`) is the logical
 *   one: `MapNames` translates both ways for the names it has been told.
 */
const MAP_RULE = /^%\[req\.ssl_sni,lower,map\(([^()\s]+)\)\]$/;

/** The name the API's storage gives a map uploaded as `name`. */
export function storageName(name: string): string {
  const base = name.endsWith('.map') ? name.slice(0, -4) : name;
  return `${base.replace(/[^A-Za-z0-9_-]/g, '_')}.map`;
}

/** The switching rule's `name` that routes by the map in `file`. */
export function mapRuleName(file: string): string {
  if (!/^\/[A-Za-z0-9_./-]+$/.test(file) || file.includes('..'))
    throw new RefusedOperationError(`refusing the map path ${JSON.stringify(file)}`);
  return `%[req.ssl_sni,lower,map(${file})]`;
}

/** The map file a switching rule routes by, when it is the map rule (no condition); else undefined. */
export function mapRuleFile(rule: { name?: string; cond?: string }): string | undefined {
  if (rule.cond !== undefined && rule.cond !== '') return undefined;
  return MAP_RULE.exec(rule.name ?? '')?.[1];
}

/** Logical map names (as plans name them) by the name the API stores them under. */
export class MapNames {
  private readonly byStorage = new Map<string, string>();

  constructor(names: readonly string[] = []) {
    for (const n of names) this.learn(n);
  }

  learn(name: string): void {
    this.byStorage.set(storageName(name), name);
  }

  /** The logical name of the map in `file` (its stored name when no logical name is known). */
  logical(file: string): string {
    const stored = basename(file);
    return this.byStorage.get(stored) ?? stored;
  }
}

/** A map file's text: one `host backend` line per entry, sorted, every value checked once more. */
export function mapText(entries: ReadonlyMap<string, string>): string {
  const lines = [...entries]
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
    .map(([host, backend]) => `${checkedHost(host)} ${checkedName(backend, 'backend')}\n`);
  return lines.join('');
}

interface StoredMap {
  file?: string;
  storage_name?: string;
}

/**
 * The map files in the API's storage: where each is (its path, for the frontend's rule), created or given
 * new content before a commit that loads it. Content written here is loaded by the next reload only; the
 * runtime path changes what HAProxy runs through `runtime-maps.ts`.
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
      await this.client.PUT('/services/haproxy/storage/maps/{name}', {
        params: { path: { name: stored }, query: { skip_reload: true } },
        body: content,
        signal,
      });
      return file;
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
