import type { Owner, RawState } from '../../haproxy/model.js';
import { applyOperations } from '../../plan/apply.js';
import type { Plan } from '../../plan/plan.js';
import type { DataplaneClient } from './client.js';
import { mapRuleFile, storageName } from './map-names.js';
import { checkedHost, checkedName, type Snapshot } from './mapping.js';
import type { Counter } from './options.js';

/** Map files in the API's storage (`map-names.ts` says how the API names them). */

/** A map file's text: one `host backend` line per entry, sorted, every value checked once more. */
export function mapText(entries: ReadonlyMap<string, string>): string {
  const lines = [...entries]
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
    .map(([host, backend]) => `${checkedHost(host)} ${checkedName(backend, 'backend')}\n`);
  return lines.join('');
}

const EMPTY_MAP = '# no entries\n';

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
        // The API refuses an empty body (400 "value is required"): an empty map is a comment line.
        body: content === '' ? EMPTY_MAP : content,
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

  /**
   * The SNI maps a reload path needs in the storage, by name -> path: a map the plan's frontend starts
   * routing by, and a map whose entries the plan changes, hold the plan's target entries (the reload loads
   * them); a map only kept is left as it is.
   */
  async forPlan(
    plan: Plan,
    current: RawState,
    owner: Owner,
    signal: AbortSignal,
    counter: Counter,
  ): Promise<Map<string, string>> {
    const names = mapsOf(plan);
    const files = new Map<string, string>();
    if (names.size === 0) return files;
    const target = applyOperations(current, plan.operations, owner);
    const routing = new Set(current.frontends.flatMap((f) => (f.sniMap ? [f.sniMap] : [])));
    const changed = new Set(
      plan.operations.flatMap((op) =>
        op.kind === 'set_map_entry' || op.kind === 'delete_map_entry' ? [op.map] : [],
      ),
    );
    for (const name of names) {
      const entries = target.maps?.find((m) => m.name === name)?.entries ?? new Map<string, string>();
      const content = changed.has(name) || !routing.has(name) ? mapText(entries) : undefined;
      files.set(name, await this.write(name, content, signal, counter));
    }
    return files;
  }

  /** Forgets where maps are (someone may have deleted one). */
  forget(): void {
    this.files.clear();
  }
}

/** Whether a frontend of `snapshot` routes by an SNI map. */
export function routesByMap(snapshot: Snapshot): boolean {
  return snapshot.frontends.some((f) =>
    (f.backend_switching_rule_list ?? []).some((r) => mapRuleFile(r) !== undefined),
  );
}

/** The SNI maps a plan names: a frontend's, and those of its map entries. */
export function mapsOf(plan: Plan): Set<string> {
  const names = new Set<string>();
  for (const op of plan.operations) {
    if ((op.kind === 'create_frontend' || op.kind === 'update_frontend') && op.frontend.sniMap)
      names.add(op.frontend.sniMap);
    if (op.kind === 'set_map_entry' || op.kind === 'delete_map_entry') names.add(op.map);
  }
  return names;
}
