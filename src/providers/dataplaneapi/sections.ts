import type { Tags } from '../../haproxy/model.js';
import type { BackendSettings, Operation } from '../../plan/plan.js';
import { mapRuleFile, mapRuleName } from './map-names.js';
import {
  type ApiBackend,
  type ApiFrontend,
  type ApiRule,
  type ApiServer,
  BIND_NAME,
  type ChildTags,
  checkedName,
  checkedPort,
  checkedServerAddress,
  childTags,
  isHelloAccept,
  ruleHost,
  ruleKey,
} from './mapping.js';
import {
  absentOrRefuse,
  clone,
  existing,
  newServer,
  ownBind,
  ownRule,
  ownTcpRules,
  RefusedOperationError,
  type Tagging,
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

/** What the sections are written with: the tagging, and the tags of each backend as read (rules by shape). */
export interface SectionContext extends Tagging {
  backendTags: (name: string) => Tags;
  /** The path of a map in the API's storage (map routing), resolved before the writes are planned. */
  mapFile?: (name: string) => string;
}

/** The map rule for `sniMap`: last, after every other rule (a host rule still wins over the map). */
function mapRule(c: SectionContext, sniMap: string): ApiRule {
  const file = c.mapFile?.(sniMap);
  if (file === undefined) throw new RefusedOperationError(`map ${sniMap} is not in the API's storage`);
  return { name: mapRuleName(file) };
}

/** `rules` without any map rule, then `map` (the rule to keep or write), if any. */
function withMap(rules: ApiRule[], map: ApiRule | undefined): ApiRule[] {
  const others = rules.filter((r) => mapRuleFile(r) === undefined);
  return map ? [...others, map] : others;
}

/** The rule list a set_switching_rules asks for: ours built, foreign ones exactly as read. */
function rulesFor(
  op: Extract<Operation, { kind: 'set_switching_rules' }>,
  current: ApiRule[],
  children: ChildTags | undefined,
  t: Tagging,
): ApiRule[] {
  const foreign = new Map<string, ApiRule[]>();
  for (const r of current) {
    if (children && t.owner.owns(children.rule(r))) continue;
    const key = ruleKey(r.name, ruleHost(r));
    foreign.set(key, [...(foreign.get(key) ?? []), r]);
  }
  return op.rules.map((r) => {
    if (r.owned) return ownRule(r.backend, r.host, t);
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
  t: Tagging,
): Write {
  if (w.create) {
    absentOrRefuse(backends, name, 'backend');
    if (w.update || w.updates.length > 0 || w.deletes.length > 0)
      throw new RefusedOperationError(`backend ${name} is created and changed in one plan`);
    const servers: Record<string, ApiServer> = {};
    for (const op of w.creates) {
      if (servers[op.server.name]) throw new RefusedOperationError(`server ${name}/${op.server.name} twice`);
      servers[op.server.name] = newServer(op.server, t);
    }
    const body = t.writer.section<ApiBackend>(
      {
        name: checkedName(name, 'backend'),
        mode: 'tcp',
        balance: { algorithm: w.create.balance as NonNullable<ApiBackend['balance']>['algorithm'] },
        servers,
      },
      t.owner.tags(w.create.cluster),
    );
    return { kind: 'create_backend', body };
  }
  const body = clone(existing(backends, name, 'backend'));
  if (w.update) {
    body.balance = { algorithm: w.update.balance as NonNullable<ApiBackend['balance']>['algorithm'] };
    t.writer.section(body, t.owner.tags(w.update.cluster));
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
    servers.set(op.server.name, newServer(op.server, t));
  }
  body.servers = Object.fromEntries(servers);
  return { kind: 'replace_backend', name, body };
}

export function frontendWrite(
  name: string,
  w: FrontendWork,
  frontends: Map<string, ApiFrontend>,
  c: SectionContext,
): Write {
  if (w.create) {
    absentOrRefuse(frontends, name, 'frontend');
    const f = w.create.frontend;
    const body = c.writer.section<ApiFrontend>(
      {
        name: checkedName(name, 'frontend'),
        mode: 'tcp',
        ...(f.defaultBackend !== null ? { default_backend: checkedName(f.defaultBackend, 'backend') } : {}),
        binds: { [BIND_NAME]: ownBind(f.bind, c) },
        tcp_request_rule_list: ownTcpRules(f.inspectDelayMs, c),
        backend_switching_rule_list: withMap(
          w.rules ? rulesFor(w.rules, [], undefined, c) : [],
          f.sniMap ? mapRule(c, f.sniMap) : undefined,
        ),
      },
      c.owner.tags(),
    );
    return { kind: 'create_frontend', body };
  }
  const current = existing(frontends, name, 'frontend');
  const children = childTags(current, c.backendTags);
  const currentRules = current.backend_switching_rule_list ?? [];
  const currentMap = currentRules.find((r) => mapRuleFile(r) !== undefined);
  const rulesOf = (op: NonNullable<FrontendWork['rules']>, map: ApiRule | undefined = currentMap) =>
    withMap(
      rulesFor(
        op,
        currentRules.filter((r) => r !== currentMap),
        children,
        c,
      ),
      map,
    );
  if (!w.update) {
    if (!w.rules) throw new Error(`nothing to write for frontend ${name}`);
    // Only the rules change: one replace-all of the list, unless the inspect delay carries a comment an
    // earlier build wrote (v3.2.15 doubles it at every write): then the frontend, without it.
    const tcp = current.tcp_request_rule_list ?? [];
    if (!tcp.some((r) => r.type === 'inspect-delay' && r.metadata !== undefined))
      return { kind: 'replace_rules', frontend: name, body: rulesOf(w.rules) };
    const body = clone(current);
    body.tcp_request_rule_list = tcp.map((r) => {
      if (r.type !== 'inspect-delay') return r;
      const { metadata: _doubled, ...delay } = r;
      return delay;
    });
    body.backend_switching_rule_list = rulesOf(w.rules);
    return { kind: 'replace_frontend', name, body };
  }
  const f = w.update.frontend;
  const body = c.writer.section(clone(current), c.owner.tags());
  body.mode = 'tcp';
  if (f.defaultBackend !== null) body.default_backend = checkedName(f.defaultBackend, 'backend');
  else delete body.default_backend;
  // Our bind replaces our old one; binds another tool added stay.
  const binds = Object.entries(body.binds ?? {}).filter(([, b]) => !c.owner.owns(children.bind(b)));
  const bindName = binds.some(([key]) => key === BIND_NAME) ? `${BIND_NAME}_sni` : BIND_NAME;
  body.binds = Object.fromEntries([...binds, [bindName, { ...ownBind(f.bind, c), name: bindName }]]);
  // The inspect delay and the ClientHello accept are ours in our frontend; other tcp rules stay after them.
  const otherTcp = (body.tcp_request_rule_list ?? []).filter(
    (r) => !c.owner.owns(children.tcpRule(r)) && r.type !== 'inspect-delay' && !isHelloAccept(r),
  );
  body.tcp_request_rule_list = [...ownTcpRules(f.inspectDelayMs, c), ...otherTcp];
  const map = f.sniMap ? mapRule(c, f.sniMap) : undefined;
  body.backend_switching_rule_list = w.rules
    ? rulesOf(w.rules, map)
    : withMap(currentRules.filter((r) => r !== currentMap).map(clone), map);
  return { kind: 'replace_frontend', name, body };
}
