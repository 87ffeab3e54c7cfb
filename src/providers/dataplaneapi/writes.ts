import type { Owner, Tags } from '../../haproxy/model.js';
import type { BackendSettings, Operation, Plan } from '../../plan/plan.js';
import { TerminalError } from '../provider.js';
import {
  type ApiBackend,
  type ApiBind,
  type ApiFrontend,
  type ApiRule,
  type ApiServer,
  type ApiTcpRule,
  checkedBindAddress,
  checkedHost,
  checkedName,
  checkedPort,
  checkedServerAddress,
  checkedTags,
  HELLO_TEST,
  isHelloAccept,
  type Metadata,
  metadataToTags,
  ruleHost,
  ruleKey,
  type Snapshot,
  tagsToMetadata,
} from './mapping.js';

/**
 * Turns a plan into the fewest Data Plane API writes, from the objects of the last read (pure, no I/O):
 * - a plan of address/port changes only, small enough, goes through the runtime path (no transaction, no
 *   reload): one server replace per change;
 * - anything else is one transaction: one request per backend touched (a new backend with its servers is one
 *   `full_section` POST; a changed one one `full_section` PUT of the object as read, changed), one for the
 *   frontend's switching rules (replace-all) or the whole frontend when its settings change, one per deletion.
 * Objects are changed from their raw form as read, so fields and children this service does not manage
 * (including foreign switching rules in its frontend) are sent back exactly as they were.
 */
export type Write =
  | { kind: 'create_backend'; body: ApiBackend }
  | { kind: 'replace_backend'; name: string; body: ApiBackend }
  | { kind: 'delete_backend'; name: string }
  | { kind: 'create_frontend'; body: ApiFrontend }
  | { kind: 'replace_frontend'; name: string; body: ApiFrontend }
  | { kind: 'replace_rules'; frontend: string; body: ApiRule[] }
  | { kind: 'delete_frontend'; name: string };

export interface ServerUpdate {
  backend: string;
  server: string;
  body: ApiServer;
}

export type WritePlan =
  | { kind: 'none' }
  | { kind: 'runtime'; updates: ServerUpdate[] }
  /** `moves`: the plan only moves server endpoints, too many for one request each. */
  | { kind: 'transaction'; writes: Write[]; moves?: ServerUpdate[] };

export interface WriteOptions {
  /** Most server updates sent one by one through the runtime path; more go into one transaction. */
  runtimeMaxServers: number;
  /** Whose tags what is written carries, and which parts of our frontend (bind, tcp rules) are ours. */
  owner: Owner;
}

/** The name of the bind the service gives its frontend. */
export const BIND_NAME = 'kubebyon';

export class RefusedOperationError extends TerminalError {
  override name = 'RefusedOperationError';
}

const clone = <T>(v: T): T => structuredClone(v);

function ownerMetadata(existing: unknown, tags: Tags): Metadata {
  // Our keys replace their old values; keys another tool put there stay.
  const kept = existing && typeof existing === 'object' ? (existing as Metadata) : {};
  return { ...clone(kept), ...tagsToMetadata(checkedTags(tags)) };
}

// Ownership was checked by the registry before the plan got here; what is left is existence.
function existing<T>(items: Map<string, T>, name: string, what: string): T {
  const item = items.get(name);
  if (!item) throw new RefusedOperationError(`${what} ${name} is not in the configuration as last read`);
  return item;
}

function absentOrRefuse(items: Map<string, unknown>, name: string, what: string): void {
  if (items.has(name))
    throw new RefusedOperationError(`refusing to create ${what} ${name}: it exists already`);
}

function newServer(
  s: { name: string; address: string; port: number; check: boolean },
  owner: Owner,
): ApiServer {
  return {
    name: checkedName(s.name, 'server'),
    address: checkedServerAddress(s.address),
    port: checkedPort(s.port, 'server'),
    ...(s.check ? { check: 'enabled' as const } : {}),
    metadata: tagsToMetadata(owner.tags()),
  };
}

function ownRule(backend: string, host: string, owner: Owner): ApiRule {
  return {
    name: checkedName(backend, 'backend'),
    cond: 'if',
    cond_test: `{ req.ssl_sni -i ${checkedHost(host)} }`,
    metadata: tagsToMetadata(owner.tags()),
  };
}

function ownTcpRules(inspectDelayMs: number, owner: Owner): ApiTcpRule[] {
  if (!Number.isInteger(inspectDelayMs) || inspectDelayMs < 0)
    throw new RefusedOperationError('bad inspect delay');
  const metadata = tagsToMetadata(owner.tags());
  return [
    { type: 'inspect-delay', timeout: inspectDelayMs, metadata },
    { type: 'content', action: 'accept', cond: 'if', cond_test: HELLO_TEST, metadata },
  ];
}

function ownBind(bind: { address: string; port: number }, owner: Owner): ApiBind {
  return {
    name: BIND_NAME,
    address: checkedBindAddress(bind.address),
    port: checkedPort(bind.port, 'bind'),
    metadata: tagsToMetadata(owner.tags()),
  };
}

/** The rule list a set_switching_rules asks for: ours built, foreign ones exactly as read. */
function rulesFor(
  op: Extract<Operation, { kind: 'set_switching_rules' }>,
  current: ApiRule[],
  owner: Owner,
): ApiRule[] {
  const foreign = new Map<string, ApiRule[]>();
  for (const r of current) {
    if (owner.owns(metadataToTags(r.metadata))) continue;
    const key = ruleKey(r.name, ruleHost(r));
    foreign.set(key, [...(foreign.get(key) ?? []), r]);
  }
  return op.rules.map((r) => {
    if (r.owned) return ownRule(r.backend, r.host, owner);
    const kept = foreign.get(ruleKey(r.backend, r.host))?.shift();
    if (!kept)
      throw new RefusedOperationError(
        `foreign switching rule ${r.backend} (${r.host}) is not in frontend ${op.frontend} as last read`,
      );
    return clone(kept);
  });
}

interface BackendWork {
  create?: BackendSettings;
  update?: BackendSettings;
  creates: Array<Extract<Operation, { kind: 'create_server' }>>;
  updates: Array<Extract<Operation, { kind: 'update_server' }>>;
  deletes: Array<Extract<Operation, { kind: 'delete_server' }>>;
}

/** A plan of server address/port changes only, each to a server of ours as read: the runtime path's case. */
function runtimeUpdates(plan: Plan, backends: Map<string, ApiBackend>): ServerUpdate[] | undefined {
  const updates: ServerUpdate[] = [];
  for (const op of plan.operations) {
    if (op.kind !== 'update_server') return undefined;
    const backend = existing(backends, op.backend, 'backend');
    const servers = new Map(Object.values(backend.servers ?? {}).map((s) => [s.name, s]));
    const current = existing(servers, op.server.name, `server ${op.backend}/`);
    if ((current.check === 'enabled') !== op.server.check) return undefined;
    // Exactly the server as read but for address and port: the API applies that without a reload.
    updates.push({
      backend: op.backend,
      server: op.server.name,
      body: {
        ...clone(current),
        address: checkedServerAddress(op.server.address),
        port: checkedPort(op.server.port, 'server'),
      },
    });
  }
  return updates;
}

export function planWrites(plan: Plan, snapshot: Snapshot, options: WriteOptions): WritePlan {
  if (plan.operations.length === 0) return { kind: 'none' };
  const backends = new Map(snapshot.backends.map((b) => [b.name, b]));
  const frontends = new Map(snapshot.frontends.map((f) => [f.name, f]));

  const { owner } = options;
  const runtime = runtimeUpdates(plan, backends);
  if (runtime && runtime.length <= options.runtimeMaxServers) return { kind: 'runtime', updates: runtime };

  const perBackend = new Map<string, BackendWork>();
  const work = (name: string): BackendWork => {
    let w = perBackend.get(name);
    if (!w) {
      w = { creates: [], updates: [], deletes: [] };
      perBackend.set(name, w);
    }
    return w;
  };
  const frontendOps = new Map<
    string,
    {
      create?: Extract<Operation, { kind: 'create_frontend' }>;
      update?: Extract<Operation, { kind: 'update_frontend' }>;
      rules?: Extract<Operation, { kind: 'set_switching_rules' }>;
    }
  >();
  const frontendWork = (name: string) => {
    let w = frontendOps.get(name);
    if (!w) {
      w = {};
      frontendOps.set(name, w);
    }
    return w;
  };
  const deleteFrontends: string[] = [];
  const deleteBackends: string[] = [];

  for (const op of plan.operations) {
    switch (op.kind) {
      case 'create_backend':
        work(op.backend.name).create = op.backend;
        break;
      case 'update_backend':
        work(op.backend.name).update = op.backend;
        break;
      case 'create_server':
        work(op.backend).creates.push(op);
        break;
      case 'update_server':
        work(op.backend).updates.push(op);
        break;
      case 'delete_server':
        work(op.backend).deletes.push(op);
        break;
      case 'create_frontend':
        frontendWork(op.frontend.name).create = op;
        break;
      case 'update_frontend':
        frontendWork(op.frontend.name).update = op;
        break;
      case 'set_switching_rules':
        frontendWork(op.frontend).rules = op;
        break;
      case 'delete_frontend':
        deleteFrontends.push(op.name);
        break;
      case 'delete_backend':
        deleteBackends.push(op.name);
        break;
    }
  }

  const writes: Write[] = [];
  // Backends first: the rules written next point at them.
  for (const [name, w] of perBackend) writes.push(backendWrite(name, w, backends, owner));
  for (const [name, w] of frontendOps) writes.push(frontendWrite(name, w, frontends, owner));
  for (const name of deleteFrontends) {
    existing(frontends, name, 'frontend');
    writes.push({ kind: 'delete_frontend', name });
  }
  for (const name of deleteBackends) {
    existing(backends, name, 'backend');
    writes.push({ kind: 'delete_backend', name });
  }
  return runtime ? { kind: 'transaction', writes, moves: runtime } : { kind: 'transaction', writes };
}

function backendWrite(name: string, w: BackendWork, backends: Map<string, ApiBackend>, owner: Owner): Write {
  if (w.create) {
    absentOrRefuse(backends, name, 'backend');
    if (w.update || w.updates.length > 0 || w.deletes.length > 0)
      throw new RefusedOperationError(`backend ${name} is created and changed in one plan`);
    const servers: Record<string, ApiServer> = {};
    for (const op of w.creates) {
      if (servers[op.server.name]) throw new RefusedOperationError(`server ${name}/${op.server.name} twice`);
      servers[op.server.name] = newServer(op.server, owner);
    }
    const body: ApiBackend = {
      name: checkedName(name, 'backend'),
      mode: 'tcp',
      balance: { algorithm: w.create.balance as NonNullable<ApiBackend['balance']>['algorithm'] },
      metadata: tagsToMetadata(checkedTags(owner.tags(w.create.cluster))),
      servers,
    };
    return { kind: 'create_backend', body };
  }
  const body = clone(existing(backends, name, 'backend'));
  if (w.update) {
    body.balance = { algorithm: w.update.balance as NonNullable<ApiBackend['balance']>['algorithm'] };
    body.metadata = ownerMetadata(body.metadata, owner.tags(w.update.cluster));
  }
  const servers = new Map(Object.entries(body.servers ?? {}));
  const byName = new Map([...servers.values()].map((s) => [s.name, s]));
  const ownedServer = (server: string) => existing(byName, server, `server ${name}/`);
  for (const op of w.deletes) {
    ownedServer(op.server.name);
    for (const [key, s] of servers) if (s.name === op.server.name) servers.delete(key);
  }
  for (const op of w.updates) {
    const s = ownedServer(op.server.name);
    s.address = checkedServerAddress(op.server.address);
    s.port = checkedPort(op.server.port, 'server');
    if (op.server.check) s.check = 'enabled';
    else delete s.check;
  }
  for (const op of w.creates) {
    if (byName.has(op.server.name))
      throw new RefusedOperationError(
        `refusing to create server ${name}/${op.server.name}: it exists already`,
      );
    servers.set(op.server.name, newServer(op.server, owner));
  }
  body.servers = Object.fromEntries(servers);
  return { kind: 'replace_backend', name, body };
}

function frontendWrite(
  name: string,
  w: {
    create?: Extract<Operation, { kind: 'create_frontend' }>;
    update?: Extract<Operation, { kind: 'update_frontend' }>;
    rules?: Extract<Operation, { kind: 'set_switching_rules' }>;
  },
  frontends: Map<string, ApiFrontend>,
  owner: Owner,
): Write {
  if (w.create) {
    absentOrRefuse(frontends, name, 'frontend');
    const f = w.create.frontend;
    const body: ApiFrontend = {
      name: checkedName(name, 'frontend'),
      mode: 'tcp',
      metadata: tagsToMetadata(owner.tags()),
      ...(f.defaultBackend !== null ? { default_backend: checkedName(f.defaultBackend, 'backend') } : {}),
      binds: { [BIND_NAME]: ownBind(f.bind, owner) },
      tcp_request_rule_list: ownTcpRules(f.inspectDelayMs, owner),
      backend_switching_rule_list: w.rules ? rulesFor(w.rules, [], owner) : [],
    };
    return { kind: 'create_frontend', body };
  }
  const current = existing(frontends, name, 'frontend');
  if (!w.update) {
    // Only the rules change: one replace-all of the list.
    if (!w.rules) throw new Error(`nothing to write for frontend ${name}`);
    return {
      kind: 'replace_rules',
      frontend: name,
      body: rulesFor(w.rules, current.backend_switching_rule_list ?? [], owner),
    };
  }
  const f = w.update.frontend;
  const body = clone(current);
  body.mode = 'tcp';
  body.metadata = ownerMetadata(body.metadata, owner.tags());
  if (f.defaultBackend !== null) body.default_backend = checkedName(f.defaultBackend, 'backend');
  else delete body.default_backend;
  // Our bind replaces our old one; binds another tool added stay.
  const binds = Object.entries(body.binds ?? {}).filter(([, b]) => !owner.owns(metadataToTags(b.metadata)));
  const bindName = binds.some(([key]) => key === BIND_NAME) ? `${BIND_NAME}_sni` : BIND_NAME;
  body.binds = Object.fromEntries([...binds, [bindName, { ...ownBind(f.bind, owner), name: bindName }]]);
  // The inspect delay and the ClientHello accept are ours in our frontend; other tcp rules stay after them.
  const otherTcp = (body.tcp_request_rule_list ?? []).filter(
    (r) => !owner.owns(metadataToTags(r.metadata)) && r.type !== 'inspect-delay' && !isHelloAccept(r),
  );
  body.tcp_request_rule_list = [...ownTcpRules(f.inspectDelayMs, owner), ...otherTcp];
  if (w.rules)
    body.backend_switching_rule_list = rulesFor(w.rules, current.backend_switching_rule_list ?? [], owner);
  return { kind: 'replace_frontend', name, body };
}

/**
 * The configuration as the API holds it once `work` has been applied to `snapshot`, at `version`: the objects
 * exactly as they were sent. A pass after the service's own commit then needs no new read of both lists,
 * which costs what the API's parse of the whole file costs. Only valid when nobody else wrote meanwhile
 * (the caller checks that the version moved by exactly the service's own writes). Pure.
 */
export function snapshotAfter(snapshot: Snapshot, work: WritePlan, version: number): Snapshot {
  const frontends = new Map(snapshot.frontends.map((f) => [f.name, f]));
  const backends = new Map(snapshot.backends.map((b) => [b.name, b]));
  const must = <T>(items: Map<string, T>, name: string, what: string): T => {
    const item = items.get(name);
    if (!item) throw new Error(`${what} ${name} is not in the snapshot`);
    return item;
  };
  if (work.kind === 'runtime') {
    for (const u of work.updates) {
      const b = must(backends, u.backend, 'backend');
      const servers = Object.fromEntries(
        Object.entries(b.servers ?? {}).map(([key, s]) => [key, s.name === u.server ? clone(u.body) : s]),
      );
      backends.set(u.backend, { ...b, servers });
    }
  } else if (work.kind === 'transaction') {
    for (const w of work.writes) {
      switch (w.kind) {
        case 'create_backend':
          backends.set(w.body.name, clone(w.body));
          break;
        case 'replace_backend':
          must(backends, w.name, 'backend');
          backends.set(w.name, clone(w.body));
          break;
        case 'delete_backend':
          backends.delete(w.name);
          break;
        case 'create_frontend':
          frontends.set(w.body.name, clone(w.body));
          break;
        case 'replace_frontend':
          must(frontends, w.name, 'frontend');
          frontends.set(w.name, clone(w.body));
          break;
        case 'replace_rules':
          frontends.set(w.frontend, {
            ...must(frontends, w.frontend, 'frontend'),
            backend_switching_rule_list: clone(w.body),
          });
          break;
        case 'delete_frontend':
          frontends.delete(w.name);
          break;
      }
    }
  }
  return { version, frontends: [...frontends.values()], backends: [...backends.values()] };
}
