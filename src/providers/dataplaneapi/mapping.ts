import { isIP } from 'node:net';
import type {
  Owner,
  RawBackend,
  RawFrontend,
  RawRule,
  RawServer,
  RawState,
  Tags,
} from '../../haproxy/model.js';
import { TerminalError } from '../../model/errors.js';
import { isHaproxyName } from '../../naming/names.js';
import { validateHost } from '../../routes/host.js';
import type { TagStore } from './capability.js';
import type { Schemas } from './client.js';
import { type MapNames, mapRuleFile } from './map-names.js';
import { ownTags, sectionTags, taggedByDescription } from './tags.js';

/**
 * Pure translation between the Data Plane API's objects (as its generated types describe them) and the raw
 * objects the planner reads. No I/O here.
 */
export type ApiFrontend = Schemas['frontend'];
export type ApiBackend = Schemas['backend'];
export type ApiServer = Schemas['server'];
export type ApiBind = Schemas['bind'];
export type ApiRule = Schemas['backend_switching_rule'];
export type ApiTcpRule = Schemas['tcp_request_rule'];

/** What one read of the API returned, keyed by the configuration version it was read at. */
export interface Snapshot {
  version: number;
  frontends: ApiFrontend[];
  backends: ApiBackend[];
}

export const HELLO_TEST = '{ req.ssl_hello_type 1 }';
const SNI_TEST = /^\{\s*req\.ssl_sni\s+-i\s+(\S+)\s*\}$/;
/** The name of the bind the service gives its frontend. */
export const BIND_NAME = 'kubebyon';

function byName<T extends { name?: string }>(a: T, b: T): number {
  const x = a.name ?? '';
  const y = b.name ?? '';
  return x < y ? -1 : x > y ? 1 : 0;
}

/** The host a switching rule routes, or, for a rule of another shape, its condition as an identity key. */
export function ruleHost(rule: ApiRule): string {
  const match = rule.cond === 'if' ? SNI_TEST.exec((rule.cond_test ?? '').trim()) : null;
  if (match?.[1]) return match[1];
  return `${rule.cond ?? ''} ${rule.cond_test ?? ''}`.trim();
}

export function ruleKey(backend: string, host: string): string {
  return `${backend}\u0000${host}`;
}

const collapse = (s: string | undefined) => (s ?? '').trim().replace(/\s+/g, ' ');

export function isHelloAccept(rule: ApiTcpRule): boolean {
  return (
    rule.type === 'content' &&
    rule.action === 'accept' &&
    rule.cond === 'if' &&
    collapse(rule.cond_test) === HELLO_TEST
  );
}

/**
 * The tags of a frontend's children. A child carrying its own tags has those. In a frontend whose tags are in
 * its description (v3.0/v3.1 carry none on children) the service's parts are known by shape instead: the bind
 * named `kubebyon`, the inspect delay and the ClientHello accept carry the frontend's tags, and a switching
 * rule the tags of the backend it routes to (so a rule another tool adds there, pointing at one of our
 * backends, reads as ours: the price of a version without metadata on rules).
 */
export interface ChildTags {
  bind(b: ApiBind): Tags;
  tcpRule(r: ApiTcpRule): Tags;
  rule(r: ApiRule): Tags;
}

export function childTags(f: ApiFrontend, backendTags: (name: string) => Tags): ChildTags {
  const byShape = taggedByDescription(f);
  const parent = sectionTags(f);
  const none: Tags = {};
  return {
    bind: (b) => ownTags(b.metadata) ?? (byShape && b.name === BIND_NAME ? parent : none),
    tcpRule: (r) =>
      ownTags(r.metadata) ?? (byShape && (r.type === 'inspect-delay' || isHelloAccept(r)) ? parent : none),
    rule: (r) => ownTags(r.metadata) ?? (byShape ? backendTags(r.name) : none),
  };
}

/** The tags of each backend as read, by name (none for a backend that is not there). */
export function backendTagsOf(backends: readonly ApiBackend[]): (name: string) => Tags {
  const tags = new Map(backends.map((b) => [b.name, sectionTags(b)]));
  return (name) => tags.get(name) ?? {};
}

/**
 * A frontend as raw state; its bind is the one `owner` tagged (another tool may have added more), else the
 * first. The map rule (`use_backend %[req.ssl_sni,lower,map(<file>)]`) is read as `sniMap`, not as a rule.
 */
export function readFrontend(
  f: ApiFrontend,
  owner: Owner,
  children: ChildTags,
  names?: MapNames,
): RawFrontend {
  const binds = Object.values(f.binds ?? {}).sort(byName);
  const bind = binds.find((b) => owner.owns(children.bind(b))) ?? binds[0];
  const tcp = f.tcp_request_rule_list ?? [];
  const delay = tcp.find((r) => r.type === 'inspect-delay');
  const all = f.backend_switching_rule_list ?? [];
  const mapFile = all.map(mapRuleFile).find((file) => file !== undefined);
  return {
    name: f.name,
    bind: bind && typeof bind.port === 'number' ? { address: bind.address || '*', port: bind.port } : null,
    inspectDelayMs: typeof delay?.timeout === 'number' ? delay.timeout : null,
    acceptsTlsHello: tcp.some(isHelloAccept),
    defaultBackend: f.default_backend ?? null,
    rules: all
      .filter((r) => mapRuleFile(r) === undefined)
      .map((r): RawRule => ({ backend: r.name, host: ruleHost(r), tags: children.rule(r) })),
    ...(mapFile !== undefined
      ? { sniMap: names ? names.logical(mapFile) : (mapFile.split('/').pop() ?? mapFile) }
      : {}),
    tags: sectionTags(f),
  };
}

/** A backend as raw state; a server without tags of its own is its backend's where the API has none on servers. */
export function readBackend(b: ApiBackend, store: TagStore): RawBackend {
  const tags = sectionTags(b);
  const inherited = store.serverTags ? {} : tags;
  const servers = Object.values(b.servers ?? {})
    .sort(byName)
    .map(
      (s): RawServer => ({
        name: s.name,
        address: s.address,
        port: s.port ?? 0,
        check: s.check === 'enabled',
        tags: ownTags(s.metadata) ?? inherited,
      }),
    );
  return { name: b.name, balance: b.balance?.algorithm ?? '', servers, tags };
}

export function readState(snapshot: Snapshot, owner: Owner, store: TagStore, names?: MapNames): RawState {
  const backendTags = backendTagsOf(snapshot.backends);
  return {
    frontends: snapshot.frontends.map((f) => readFrontend(f, owner, childTags(f, backendTags), names)),
    backends: snapshot.backends.map((b) => readBackend(b, store)),
  };
}

// --- What is sent: every value is checked here once more, so nothing unvalidated reaches haproxy.cfg. ---

function refuse(what: string): never {
  throw new TerminalError(`refusing to send ${what} to the Data Plane API`);
}

export function checkedName(name: string, what: string): string {
  if (!isHaproxyName(name)) refuse(`${what} name ${JSON.stringify(name)}`);
  return name;
}

export function checkedHost(host: string): string {
  const result = validateHost(host);
  if (!result.ok || result.host !== host) refuse(`SNI host ${JSON.stringify(host)}`);
  return host;
}

export function checkedPort(port: number, what: string): number {
  if (!Number.isInteger(port) || port < 1 || port > 65535) refuse(`${what} port ${port}`);
  return port;
}

export function checkedServerAddress(address: string): string {
  if (isIP(address) === 0) refuse(`server address ${JSON.stringify(address)}`);
  return address;
}

export function checkedBindAddress(address: string): string {
  if (address !== '*' && isIP(address) === 0) refuse(`bind address ${JSON.stringify(address)}`);
  return address;
}
