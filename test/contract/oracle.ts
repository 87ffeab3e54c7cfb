import type { BackendState, FrontendState, HaproxyState } from '../../src/haproxy/model.js';
import type { Operation } from '../../src/plan/plan.js';

/**
 * The contract suite's oracle: what HAProxy's configuration becomes once `operations` are applied to `state`,
 * in the planner's view (owned flags; tags are not compared) and kept apart from `src/plan/apply.ts` on purpose,
 * so that the providers (which use that module) are checked against an independent statement of each
 * operation's meaning.
 */
type Mutable<T> = { -readonly [K in keyof T]: T[K] };
type Frontend = Mutable<FrontendState> & { rules: FrontendState['rules'][number][] };
type Backend = Mutable<BackendState> & { servers: BackendState['servers'][number][] };

export function applyToState(state: HaproxyState, operations: readonly Operation[]): HaproxyState {
  const frontends = new Map<string, Frontend>(
    state.frontends.map((f) => [f.name, { ...f, rules: [...f.rules] }]),
  );
  const backends = new Map<string, Backend>(
    state.backends.map((b) => [b.name, { ...b, servers: b.servers.map((s) => ({ ...s })) }]),
  );
  // Map routing: a frontend routing by a map brings it (empty); entries are set and deleted by host.
  const maps = new Map((state.maps ?? []).map((m) => [m.name, new Map(m.entries)]));
  const mapOf = (name: string) => maps.get(name) ?? maps.set(name, new Map()).get(name) ?? new Map();
  const routeBy = (f: Frontend, sniMap: string, edge: Frontend['edge'] | undefined) => {
    f.sniMap = sniMap;
    if (edge) f.edge = edge;
    mapOf(sniMap);
    // Its guard's allow map comes with it (empty): every cluster open.
    if (edge) mapOf(edge.allowMap);
  };
  const backend = (name: string): Backend => {
    const b = backends.get(name);
    if (!b) throw new Error(`operation on missing backend ${name}`);
    return b;
  };
  const frontend = (name: string): Frontend => {
    const f = frontends.get(name);
    if (!f) throw new Error(`operation on missing frontend ${name}`);
    return f;
  };

  for (const op of operations) {
    switch (op.kind) {
      case 'create_frontend':
        if (frontends.has(op.frontend.name)) throw new Error(`frontend ${op.frontend.name} exists`);
        frontends.set(op.frontend.name, {
          name: op.frontend.name,
          owned: true,
          bind: op.frontend.bind,
          inspectDelayMs: op.frontend.inspectDelayMs,
          acceptsTlsHello: true,
          defaultBackend: op.frontend.defaultBackend,
          rules: [],
          tags: {},
        });
        routeBy(frontend(op.frontend.name), op.frontend.sniMap, op.frontend.edge);
        break;
      case 'update_frontend':
        Object.assign(frontend(op.frontend.name), {
          bind: op.frontend.bind,
          inspectDelayMs: op.frontend.inspectDelayMs,
          acceptsTlsHello: true,
          defaultBackend: op.frontend.defaultBackend,
        });
        routeBy(frontend(op.frontend.name), op.frontend.sniMap, op.frontend.edge);
        break;
      case 'delete_frontend':
        frontend(op.name);
        frontends.delete(op.name);
        break;
      case 'create_backend':
        if (backends.has(op.backend.name)) throw new Error(`backend ${op.backend.name} exists`);
        backends.set(op.backend.name, { ...op.backend, owned: true, servers: [], tags: {} });
        break;
      case 'delete_backend':
        backend(op.name);
        backends.delete(op.name);
        break;
      case 'create_server': {
        const b = backend(op.backend);
        if (b.servers.some((s) => s.name === op.server.name))
          throw new Error(`server ${op.server.name} exists`);
        b.servers.push({ ...op.server, owned: true, tags: {} });
        break;
      }
      case 'update_server': {
        const b = backend(op.backend);
        const i = b.servers.findIndex((s) => s.name === op.server.name);
        if (i < 0) throw new Error(`update of missing server ${op.server.name}`);
        b.servers[i] = { ...(b.servers[i] as BackendState['servers'][number]), ...op.server };
        break;
      }
      case 'delete_server': {
        const b = backend(op.backend);
        const before = b.servers.length;
        b.servers = b.servers.filter((s) => s.name !== op.server.name);
        if (b.servers.length === before) throw new Error(`delete of missing server ${op.server.name}`);
        break;
      }
      case 'set_switching_rules':
        frontend(op.frontend).rules = op.rules.map((r) => ({ ...r, tags: {} }));
        break;
      case 'set_map_entry':
        if ((mapOf(op.map).get(op.host) ?? null) !== op.previous)
          throw new Error(`map entry ${op.host} moved`);
        mapOf(op.map).set(op.host, op.backend);
        break;
      case 'delete_map_entry':
        if (mapOf(op.map).get(op.host) !== op.backend) throw new Error(`map entry ${op.host} moved`);
        mapOf(op.map).delete(op.host);
        break;
      case 'add_allow_entry':
        if (mapOf(op.map).has(op.key)) throw new Error(`allow key ${op.key} exists`);
        mapOf(op.map).set(op.key, '1');
        break;
      case 'delete_allow_entry':
        if (!mapOf(op.map).delete(op.key)) throw new Error(`allow key ${op.key} missing`);
        break;
    }
  }
  return {
    frontends: [...frontends.values()],
    backends: [...backends.values()],
    ...(maps.size > 0 ? { maps: [...maps].map(([name, entries]) => ({ name, entries })) } : {}),
  };
}
