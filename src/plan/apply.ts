import type { Owner, RawBackend, RawFrontend, RawMap, RawRule, RawState } from '../haproxy/model.js';
import { ConcurrentChangeError } from '../providers/provider.js';
import type { Operation } from './plan.js';

type Named = { name: string };

/**
 * The one statement of what each operation does to HAProxy's objects: `state` with `operations` applied, the
 * objects created carrying `owner`'s tags. The memory provider, the stock provider's owned file and the Data
 * Plane API provider's raw-text path all take their target from here; a new operation kind is added here and
 * in each provider's writer. Pure and strict about existence only (ownership is the registry's to refuse,
 * before a plan reaches a provider): an operation on a missing object, or a creation of one that exists,
 * means the plan was made from another state (`ConcurrentChangeError`: read and plan again).
 *
 * Copy on write: `state` is never changed, and the result shares with it every object no operation touched
 * (a frontend, backend or map is copied the first time an operation changes it), so a plan of a few
 * operations over thousands of routes costs no deep copy. Neither `state` nor the result may be changed in
 * place afterwards.
 */
export function applyOperations(state: RawState, operations: readonly Operation[], owner: Owner): RawState {
  // By name, in listing order (a Map keeps insertion order): one lookup per operation, not one scan.
  const w: Working = {
    frontends: new Map(state.frontends.map((f) => [f.name, f])),
    backends: new Map(state.backends.map((b) => [b.name, b])),
    maps: new Map((state.maps ?? []).map((m) => [m.name, m])),
    owner,
    copied: new Set(),
  };
  for (const op of operations) apply(w, op);
  const result: RawState = { frontends: [...w.frontends.values()], backends: [...w.backends.values()] };
  if (w.maps.size > 0 || state.maps !== undefined) result.maps = [...w.maps.values()];
  return result;
}

interface Working {
  frontends: Map<string, RawFrontend>;
  backends: Map<string, RawBackend>;
  maps: Map<string, RawMap>;
  owner: Owner;
  /** Objects this application made (new or copied): changed in place from then on. */
  copied: Set<object>;
}

/** A frontend that routes by a map brings the map (empty) when it is not there yet. */
function mapOf(w: Working, name: string): RawMap {
  const m = w.maps.get(name);
  if (m && w.copied.has(m)) return m;
  const copy: RawMap = { name, entries: new Map(m?.entries ?? []) };
  w.copied.add(copy);
  w.maps.set(name, copy);
  return copy;
}

/** The frontend `name`, copied for writing. */
function frontendToChange(w: Working, name: string): RawFrontend {
  const f = find(w.frontends, name, 'frontend');
  if (w.copied.has(f)) return f;
  const copy: RawFrontend = { ...f, rules: [...f.rules] };
  w.copied.add(copy);
  w.frontends.set(name, copy);
  return copy;
}

/** The backend `name`, copied for writing (its servers too: an update changes one in place). */
function backendToChange(w: Working, name: string): RawBackend {
  const b = find(w.backends, name, 'backend');
  if (w.copied.has(b)) return b;
  const copy: RawBackend = { ...b, servers: b.servers.map((s) => ({ ...s })) };
  w.copied.add(copy);
  w.backends.set(name, copy);
  return copy;
}

function find<T extends Named>(items: Map<string, T> | T[], name: string, what: string): T {
  const item = items instanceof Map ? items.get(name) : items.find((x) => x.name === name);
  if (!item) throw new ConcurrentChangeError(`${what} ${name} is not there any more`);
  return item;
}

function absent(items: Map<string, unknown> | Named[], name: string, what: string): void {
  const there = items instanceof Map ? items.has(name) : items.some((x) => x.name === name);
  if (there) throw new ConcurrentChangeError(`${what} ${name} exists already`);
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
      const { name, bind, inspectDelayMs, defaultBackend } = op.frontend;
      const sniMap = op.frontend.sniMap ?? null;
      const created: RawFrontend = {
        name,
        bind,
        inspectDelayMs,
        defaultBackend,
        acceptsTlsHello: true,
        rules: [],
        ...(sniMap !== null ? { sniMap } : {}),
        tags: w.owner.tags(),
      };
      w.copied.add(created);
      w.frontends.set(name, created);
      if (sniMap !== null) mapOf(w, sniMap);
      return;
    }
    case 'update_frontend': {
      const { bind, inspectDelayMs, defaultBackend } = op.frontend;
      const sniMap = op.frontend.sniMap ?? null;
      const f = frontendToChange(w, op.frontend.name);
      Object.assign(f, { bind, inspectDelayMs, defaultBackend, acceptsTlsHello: true });
      if (sniMap !== null) {
        f.sniMap = sniMap;
        mapOf(w, sniMap);
      } else delete f.sniMap;
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
      f.rules = switchingRules(f.rules, op, w.owner);
      return;
    }
    default:
      applyToBackend(w, op);
  }
}

function applyToBackend(w: Working, op: Operation): void {
  switch (op.kind) {
    case 'create_backend':
      noProxy(w, op.backend.name);
      {
        const created: RawBackend = {
          name: op.backend.name,
          balance: op.backend.balance,
          servers: [],
          tags: w.owner.tags(op.backend.cluster),
        };
        w.copied.add(created);
        w.backends.set(created.name, created);
        return;
      }
    case 'update_backend': {
      const b = backendToChange(w, op.backend.name);
      Object.assign(b, { balance: op.backend.balance, tags: w.owner.tags(op.backend.cluster) });
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
      b.servers.push({ name, address, port, check, tags: w.owner.tags() });
      return;
    }
    case 'update_server': {
      const s = find(backendToChange(w, op.backend).servers, op.server.name, `server ${op.backend}/`);
      Object.assign(s, { address: op.server.address, port: op.server.port, check: op.server.check });
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

/** The rule list asked for: ours tagged anew, another owner's kept exactly as they were (the plan names them only to keep their place). */
function switchingRules(
  current: readonly RawRule[],
  op: Extract<Operation, { kind: 'set_switching_rules' }>,
  owner: Owner,
): RawRule[] {
  const foreign = current.filter((r) => !owner.owns(r.tags));
  return op.rules.map((r): RawRule => {
    if (r.owned) return { backend: r.backend, host: r.host, tags: owner.tags() };
    const i = foreign.findIndex((x) => x.backend === r.backend && x.host === r.host);
    const kept = foreign.splice(i, i < 0 ? 0 : 1)[0];
    if (i < 0 || !kept)
      throw new ConcurrentChangeError(`foreign rule ${r.backend}/${r.host} is not in ${op.frontend}`);
    return kept;
  });
}
