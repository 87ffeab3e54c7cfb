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
import { isHaproxyName } from '../../naming/names.js';
import { TAG_KEY, TAG_VALUE } from '../../registry/registry.js';
import { validateHost } from '../../routes/host.js';
import { TerminalError } from '../provider.js';
import type { Schemas } from './client.js';

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
export type Metadata = NonNullable<Schemas['backend_base']['metadata']>;

/** What one read of the API returned, keyed by the configuration version it was read at. */
export interface Snapshot {
  version: number;
  frontends: ApiFrontend[];
  backends: ApiBackend[];
}

export const HELLO_TEST = '{ req.ssl_hello_type 1 }';
const SNI_TEST = /^\{\s*req\.ssl_sni\s+-i\s+(\S+)\s*\}$/;

/** Tags as API metadata: `{"owner": {"value": "..."}}`. */
export function tagsToMetadata(tags: Tags): Metadata {
  const out: Metadata = {};
  for (const [key, value] of Object.entries(tags)) out[key] = { value };
  return out;
}

/** API metadata as tags: entries shaped `{value: "<string>"}` only; anything else is not a tag of ours. */
export function metadataToTags(metadata: unknown): Tags {
  const tags: Record<string, string> = {};
  if (!metadata || typeof metadata !== 'object') return tags;
  for (const [key, entry] of Object.entries(metadata as Record<string, unknown>)) {
    const value = entry && typeof entry === 'object' ? (entry as { value?: unknown }).value : undefined;
    if (typeof value === 'string') tags[key] = value;
  }
  return tags;
}

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

/** A frontend as raw state; its bind is the one `owner` tagged (another tool may have added more), else the first. */
export function readFrontend(f: ApiFrontend, owner: Owner): RawFrontend {
  const tags = metadataToTags(f.metadata);
  const binds = Object.values(f.binds ?? {}).sort(byName);
  const bind = binds.find((b) => owner.owns(metadataToTags(b.metadata))) ?? binds[0];
  const tcp = f.tcp_request_rule_list ?? [];
  const delay = tcp.find((r) => r.type === 'inspect-delay');
  return {
    name: f.name,
    bind: bind && typeof bind.port === 'number' ? { address: bind.address || '*', port: bind.port } : null,
    inspectDelayMs: typeof delay?.timeout === 'number' ? delay.timeout : null,
    acceptsTlsHello: tcp.some(isHelloAccept),
    defaultBackend: f.default_backend ?? null,
    rules: (f.backend_switching_rule_list ?? []).map(
      (r): RawRule => ({ backend: r.name, host: ruleHost(r), tags: metadataToTags(r.metadata) }),
    ),
    tags,
  };
}

export function readBackend(b: ApiBackend): RawBackend {
  const servers = Object.values(b.servers ?? {})
    .sort(byName)
    .map(
      (s): RawServer => ({
        name: s.name,
        address: s.address,
        port: s.port ?? 0,
        check: s.check === 'enabled',
        tags: metadataToTags(s.metadata),
      }),
    );
  return { name: b.name, balance: b.balance?.algorithm ?? '', servers, tags: metadataToTags(b.metadata) };
}

export function readState(snapshot: Snapshot, owner: Owner): RawState {
  return {
    frontends: snapshot.frontends.map((f) => readFrontend(f, owner)),
    backends: snapshot.backends.map(readBackend),
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

export function checkedTags(tags: Tags): Tags {
  for (const [k, v] of Object.entries(tags)) {
    if (!TAG_KEY.test(k) || !TAG_VALUE.test(v)) refuse(`tag ${k}=${JSON.stringify(v)}`);
  }
  return tags;
}
