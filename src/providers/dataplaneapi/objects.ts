import type { Owner } from '../../haproxy/model.js';
import { TerminalError } from '../../model/errors.js';
import {
  type ApiBackend,
  type ApiBind,
  type ApiFrontend,
  type ApiRule,
  type ApiServer,
  type ApiTcpRule,
  BIND_NAME,
  checkedBindAddress,
  checkedHost,
  checkedName,
  checkedPort,
  checkedServerAddress,
  HELLO_TEST,
} from './mapping.js';
import type { TagWriter } from './tags.js';

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

/** Whose tags the objects built carry, and where the API version keeps them. */
export interface Tagging {
  owner: Owner;
  writer: TagWriter;
}

export function newServer(
  s: { name: string; address: string; port: number; check: boolean },
  t: Tagging,
): ApiServer {
  return {
    name: checkedName(s.name, 'server'),
    address: checkedServerAddress(s.address),
    port: checkedPort(s.port, 'server'),
    ...(s.check ? { check: 'enabled' as const } : {}),
    ...t.writer.server(t.owner.tags()),
  };
}

export function ownRule(backend: string, host: string, t: Tagging): ApiRule {
  return {
    name: checkedName(backend, 'backend'),
    cond: 'if',
    cond_test: `{ req.ssl_sni -i ${checkedHost(host)} }`,
    ...t.writer.child(t.owner.tags()),
  };
}

/**
 * The inspect delay and the ClientHello accept. The delay carries no tags in any version (it is known by its
 * type): v3.2.15 doubles a comment on `tcp-request inspect-delay` each time it writes the file.
 */
export function ownTcpRules(inspectDelayMs: number, t: Tagging): ApiTcpRule[] {
  if (!Number.isInteger(inspectDelayMs) || inspectDelayMs < 0)
    throw new RefusedOperationError('bad inspect delay');
  return [
    { type: 'inspect-delay', timeout: inspectDelayMs },
    {
      type: 'content',
      action: 'accept',
      cond: 'if',
      cond_test: HELLO_TEST,
      ...t.writer.child(t.owner.tags()),
    },
  ];
}

export function ownBind(bind: { address: string; port: number }, t: Tagging): ApiBind {
  return {
    name: BIND_NAME,
    address: checkedBindAddress(bind.address),
    port: checkedPort(bind.port, 'bind'),
    ...t.writer.child(t.owner.tags()),
  };
}
