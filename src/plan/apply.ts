import { ALLOW_VALUE } from '../haproxy/allow-keys.js';
import { CowMap } from '../haproxy/cow-map.js';
import type {
  BackendState,
  FrontendState,
  HaproxyState,
  RawMap,
  ServerState,
  SwitchingRule,
  Tagger,
  Tags,
} from '../haproxy/model.js';
import { ConcurrentChangeError } from '../model/errors.js';
import type { Operation } from './operations.js';

type HasName = { readonly name: string };
type Mutable<T> = { -readonly [K in keyof T]: T[K] };

/**
 * The one statement of what each operation does to HAProxy's objects: `state` with `operations` applied, the
 * objects created owned and carrying `tagger`'s tags. The reading a plan is applied to moves on by this
 * (`Reading.derive`), and both providers write what it gives; a new operation kind is added here and in
 * each provider's writer. Pure, and strict about existence only (ownership is the registry's to refuse,
 * before a plan reaches a provider): an operation on a missing object, or a creation of one that exists,
 * means the plan was made from another state (`ConcurrentChangeError`: read and plan again).
 *
 * Copy-on-write: an object is copied the first time an operation changes it, so a small plan on a large
 * state costs what it touches, and the result shares every untouched object with `state`. Without a proxy
 * created or deleted every name keeps its place (`keptPlaces`): the backends are then patched by position,
 * found through `position` (a reading's index), without a map of every name.
 */
export function applyOperations(
  state: HaproxyState,
  operations: readonly Operation[],
  tagger: Tagger,
  position?: (backend: string) => number | undefined,
): { state: HaproxyState; keptPlaces: boolean } {
  const keptPlaces = !operations.some((op) => RESHAPING.has(op.kind));
  const w: Working = {
    frontends: new ByName(state.frontends),
    backends: keptPlaces && position ? new Placed(state.backends, position) : new ByName(state.backends),
    maps: new Map((state.maps ?? []).map((m) => [m.name, m])),
    copied: new Set(),
    tagger,
  };
  for (const op of operations) apply(w, op);
  for (const [name, m] of w.maps)
    if (w.copied.has(m)) w.maps.set(name, { name, entries: (m as MapToChange).entries.settled() });
  const maps = w.maps.size > 0 || state.maps !== undefined ? { maps: [...w.maps.values()] } : {};
  return { state: { frontends: w.frontends.list(), backends: w.backends.list(), ...maps }, keptPlaces };
}

const RESHAPING: ReadonlySet<Operation['kind']> = new Set([
  'create_frontend',
  'delete_frontend',
  'create_backend',
  'delete_backend',
]);

/** Frontends or backends by name, as the operations change them. */
interface Proxies<T extends HasName> {
  get(name: string): T | undefined;
  has(name: string): boolean;
  /** Adds `item`, or puts it in the place of the one of its name. */
  set(name: string, item: T): void;
  delete(name: string): void;
  list(): readonly T[];
}

class ByName<T extends HasName> implements Proxies<T> {
  private readonly byName: Map<string, T>;
  constructor(items: readonly T[]) {
    this.byName = new Map(items.map((x) => [x.name, x]));
  }
  get = (name: string) => this.byName.get(name);
  has = (name: string) => this.byName.has(name);
  set = (name: string, item: T) => void this.byName.set(name, item);
  delete = (name: string) => void this.byName.delete(name);
  list = () => [...this.byName.values()];
}

/** Backends as they were, the list copied at the first change and patched in the places of those replaced. */
class Placed implements Proxies<BackendState> {
  private items: readonly BackendState[];
  private copy: BackendState[] | undefined;
  constructor(
    backends: readonly BackendState[],
    private readonly position: (name: string) => number | undefined,
  ) {
    this.items = backends;
  }
  get(name: string): BackendState | undefined {
    const i = this.position(name);
    const item = i === undefined ? undefined : this.items[i];
    return item?.name === name ? item : undefined;
  }
  has = (name: string) => this.get(name) !== undefined;
  set(name: string, item: BackendState): void {
    const i = this.position(name);
    if (i === undefined || this.items[i]?.name !== name) throw new Error(`no backend ${name} to replace`);
    this.copy ??= this.items.slice();
    this.items = this.copy;
    this.copy[i] = item;
  }
  delete(name: string): void {
    throw new Error(`deleting backend ${name} changes the places of the others`);
  }
  list = () => this.items;
}

interface Working {
  frontends: Proxies<FrontendState>;
  backends: Proxies<BackendState>;
  maps: Map<string, RawMap>;
  /** Objects this call made or copied: the only ones it may change in place. */
  copied: Set<object>;
  tagger: Tagger;
}

/** A map this call may change: its entries copied on write (`CowMap`), not whole. */
interface MapToChange extends RawMap {
  readonly entries: CowMap<string, string>;
}

/** A frontend that routes by a map brings the map (empty) when it is not there yet. */
function mapOf(w: Working, name: string): MapToChange {
  const m = w.maps.get(name);
  if (m && w.copied.has(m)) return m as MapToChange;
  const copy: MapToChange = { name, entries: CowMap.edit(m?.entries) };
  w.copied.add(copy);
  w.maps.set(name, copy);
  return copy;
}

function frontendToChange(w: Working, name: string): Mutable<FrontendState> {
  const f = find(w.frontends, name, 'frontend');
  if (w.copied.has(f)) return f as Mutable<FrontendState>;
  const copy = { ...f, rules: f.rules.slice() };
  w.copied.add(copy);
  w.frontends.set(name, copy);
  return copy;
}

function backendToChange(w: Working, name: string): Mutable<BackendState> & { servers: ServerState[] } {
  const b = find(w.backends, name, 'backend');
  if (w.copied.has(b)) return b as Mutable<BackendState> & { servers: ServerState[] };
  const copy = { ...b, servers: b.servers.slice() };
  w.copied.add(copy);
  w.backends.set(name, copy);
  return copy;
}

function find<T extends HasName>(items: Proxies<T> | readonly T[], name: string, what: string): T {
  const item = isList(items) ? items.find((x) => x.name === name) : items.get(name);
  if (!item) throw new ConcurrentChangeError(`${what} ${name} is not there any more`);
  return item;
}

function absent(items: Proxies<HasName> | readonly HasName[], name: string, what: string): void {
  const there = isList(items) ? items.some((x) => x.name === name) : items.has(name);
  if (there) throw new ConcurrentChangeError(`${what} ${name} exists already`);
}

function isList<T>(items: Proxies<T & HasName> | readonly T[]): items is readonly T[] {
  return Array.isArray(items);
}

// Frontends and backends share HAProxy's one namespace of proxies.
function noProxy(w: Working, name: string): void {
  absent(w.frontends, name, 'frontend');
  absent(w.backends, name, 'backend');
}

function apply(w: Working, op: Operation): void {
  switch (op.kind) {
    case 'create_frontend': {
      noProxy(w, op.frontend.name);
      const { name, bind, inspectDelayMs, defaultBackend, sniMap, edge } = op.frontend;
      const created: FrontendState = {
        name,
        bind,
        inspectDelayMs,
        defaultBackend,
        acceptsTlsHello: true,
        rules: [],
        sniMap,
        edge,
        tags: w.tagger.tags(),
        owned: true,
      };
      w.copied.add(created);
      w.frontends.set(name, created);
      for (const map of [sniMap, edge.allowMap]) if (!w.maps.has(map)) mapOf(w, map);
      return;
    }
    case 'update_frontend': {
      const { bind, inspectDelayMs, defaultBackend, sniMap, edge } = op.frontend;
      const f = frontendToChange(w, op.frontend.name);
      Object.assign(f, { bind, inspectDelayMs, defaultBackend, acceptsTlsHello: true, sniMap, edge });
      for (const map of [sniMap, edge.allowMap]) if (!w.maps.has(map)) mapOf(w, map);
      return;
    }
    case 'add_allow_entry': {
      const m = mapOf(w, op.map);
      if (m.entries.has(op.key)) throw new ConcurrentChangeError(`map ${op.map}: ${op.key} is there already`);
      m.entries.set(op.key, ALLOW_VALUE);
      return;
    }
    case 'delete_allow_entry': {
      const m = mapOf(w, op.map);
      if (!m.entries.has(op.key)) throw new ConcurrentChangeError(`map ${op.map}: ${op.key} is not there`);
      m.entries.delete(op.key);
      return;
    }
    case 'set_map_entry': {
      const m = mapOf(w, op.map);
      const was = m.entries.get(op.host) ?? null;
      if (was !== op.previous)
        throw new ConcurrentChangeError(
          `map ${op.map}: ${op.host} routes to ${was ?? 'nothing'}, not ${op.previous ?? 'nothing'}`,
        );
      m.entries.set(op.host, op.backend);
      return;
    }
    case 'delete_map_entry': {
      const m = mapOf(w, op.map);
      if (m.entries.get(op.host) !== op.backend)
        throw new ConcurrentChangeError(`map ${op.map}: ${op.host} does not route to ${op.backend} any more`);
      m.entries.delete(op.host);
      return;
    }
    case 'delete_frontend':
      find(w.frontends, op.name, 'frontend');
      w.frontends.delete(op.name);
      return;
    case 'set_switching_rules': {
      const f = frontendToChange(w, op.frontend);
      f.rules = switchingRules(f.rules, op, w.tagger.tags());
      return;
    }
    default:
      applyToBackend(w, op);
  }
}

function applyToBackend(w: Working, op: Operation): void {
  switch (op.kind) {
    case 'create_backend': {
      noProxy(w, op.backend.name);
      const created: BackendState = {
        name: op.backend.name,
        balance: op.backend.balance,
        servers: [],
        tags: w.tagger.tags(),
        owned: true,
        ...(op.backend.table !== undefined ? { table: op.backend.table } : {}),
        ...(op.backend.allowMap !== undefined ? { allowMap: op.backend.allowMap } : {}),
      };
      w.copied.add(created);
      w.backends.set(op.backend.name, created);
      return;
    }
    case 'update_backend': {
      const b = backendToChange(w, op.backend.name);
      Object.assign(b, { allowMap: op.backend.allowMap });
      return;
    }
    case 'delete_backend':
      find(w.backends, op.name, 'backend');
      w.backends.delete(op.name);
      return;
    case 'create_server': {
      const b = backendToChange(w, op.backend);
      absent(b.servers, op.server.name, `server ${op.backend}/`);
      const { name, address, port, check } = op.server;
      b.servers.push({ name, address, port, check, tags: w.tagger.tags(), owned: true });
      return;
    }
    case 'update_server': {
      const b = backendToChange(w, op.backend);
      const s = find(b.servers, op.server.name, `server ${op.backend}/`);
      const { address, port, check } = op.server;
      b.servers[b.servers.indexOf(s)] = { ...s, address, port, check };
      return;
    }
    case 'delete_server': {
      const b = backendToChange(w, op.backend);
      find(b.servers, op.server.name, `server ${op.backend}/`);
      b.servers = b.servers.filter((s) => s.name !== op.server.name);
      return;
    }
  }
}

/** The rule list asked for: ours tagged anew, another owner's kept exactly as they were (named to keep their place). */
function switchingRules(
  current: FrontendState['rules'],
  op: Extract<Operation, { kind: 'set_switching_rules' }>,
  tags: Tags,
): FrontendState['rules'] {
  const foreign = current.filter((r) => !r.owned);
  return op.rules.map((r: SwitchingRule) => {
    if (r.owned) return { backend: r.backend, host: r.host, tags, owned: true };
    const i = foreign.findIndex((x) => x.backend === r.backend && x.host === r.host);
    const kept = foreign.splice(i, i < 0 ? 0 : 1)[0];
    if (i < 0 || !kept)
      throw new ConcurrentChangeError(`foreign rule ${r.backend}/${r.host} is not in ${op.frontend}`);
    return kept;
  });
}
