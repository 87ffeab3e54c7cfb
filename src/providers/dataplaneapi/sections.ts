import type { Owner } from '../../haproxy/model.js';
import type { BackendSettings, Operation } from '../../plan/plan.js';
import {
  type ApiBackend,
  type ApiFrontend,
  type ApiRule,
  type ApiServer,
  checkedName,
  checkedPort,
  checkedServerAddress,
  checkedTags,
  isHelloAccept,
  metadataToTags,
  ruleHost,
  ruleKey,
  tagsToMetadata,
} from './mapping.js';
import {
  absentOrRefuse,
  BIND_NAME,
  clone,
  existing,
  newServer,
  ownBind,
  ownerMetadata,
  ownRule,
  ownTcpRules,
  RefusedOperationError,
  type Write,
} from './objects.js';

/**
 * One write per section a plan touches (pure): a backend created with its servers or changed from its raw
 * form as read; the frontend created, changed from its raw form, or only its switching rules replaced. Fields
 * and children this service does not manage (foreign switching rules and binds in its frontend included)
 * are sent back exactly as they were read.
 */
export interface BackendWork {
  create?: BackendSettings;
  update?: BackendSettings;
  creates: Array<Extract<Operation, { kind: 'create_server' }>>;
  updates: Array<Extract<Operation, { kind: 'update_server' }>>;
  deletes: Array<Extract<Operation, { kind: 'delete_server' }>>;
}

export interface FrontendWork {
  create?: Extract<Operation, { kind: 'create_frontend' }>;
  update?: Extract<Operation, { kind: 'update_frontend' }>;
  rules?: Extract<Operation, { kind: 'set_switching_rules' }>;
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

export function backendWrite(
  name: string,
  w: BackendWork,
  backends: Map<string, ApiBackend>,
  owner: Owner,
): Write {
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

export function frontendWrite(
  name: string,
  w: FrontendWork,
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
