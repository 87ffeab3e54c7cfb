import type { Owner, Tags } from '../../haproxy/model.js';
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
  type Metadata,
  tagsToMetadata,
} from './mapping.js';

/**
 * What one write sends, and the API objects the service builds for its own parts (pure). Every value is
 * checked once more on its way into an object (`mapping.ts`), so nothing unvalidated reaches haproxy.cfg.
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

/** The name of the bind the service gives its frontend. */
export const BIND_NAME = 'kubebyon';

export class RefusedOperationError extends TerminalError {
  override name = 'RefusedOperationError';
}

export const clone = <T>(v: T): T => structuredClone(v);

// Ownership was checked by the registry before the plan got here; what is left is existence.
export function existing<T>(items: Map<string, T>, name: string, what: string): T {
  const item = items.get(name);
  if (!item) throw new RefusedOperationError(`${what} ${name} is not in the configuration as last read`);
  return item;
}

export function absentOrRefuse(items: Map<string, unknown>, name: string, what: string): void {
  if (items.has(name))
    throw new RefusedOperationError(`refusing to create ${what} ${name}: it exists already`);
}

export function ownerMetadata(existing: unknown, tags: Tags): Metadata {
  // Our keys replace their old values; keys another tool put there stay.
  const kept = existing && typeof existing === 'object' ? (existing as Metadata) : {};
  return { ...clone(kept), ...tagsToMetadata(checkedTags(tags)) };
}

export function newServer(
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

export function ownRule(backend: string, host: string, owner: Owner): ApiRule {
  return {
    name: checkedName(backend, 'backend'),
    cond: 'if',
    cond_test: `{ req.ssl_sni -i ${checkedHost(host)} }`,
    metadata: tagsToMetadata(owner.tags()),
  };
}

export function ownTcpRules(inspectDelayMs: number, owner: Owner): ApiTcpRule[] {
  if (!Number.isInteger(inspectDelayMs) || inspectDelayMs < 0)
    throw new RefusedOperationError('bad inspect delay');
  const metadata = tagsToMetadata(owner.tags());
  return [
    { type: 'inspect-delay', timeout: inspectDelayMs, metadata },
    { type: 'content', action: 'accept', cond: 'if', cond_test: HELLO_TEST, metadata },
  ];
}

export function ownBind(bind: { address: string; port: number }, owner: Owner): ApiBind {
  return {
    name: BIND_NAME,
    address: checkedBindAddress(bind.address),
    port: checkedPort(bind.port, 'bind'),
    metadata: tagsToMetadata(owner.tags()),
  };
}
