import type { RawRule, RawServer, RawState } from '../../haproxy/model.js';
import type { Operation } from '../../plan/plan.js';
import { isOwned, ownerTags } from '../../registry/ownership.js';
import { ConcurrentChangeError, TerminalError } from '../provider.js';

/** An operation names an object the service does not own: refused, whatever the plan says. */
export class NotOwnedError extends TerminalError {
  override name = 'NotOwnedError';
}

/**
 * What the owned objects become once `operations` are applied to `state`, with the tags each object carries
 * (the meaning of each operation is `applyToState`'s). Pure and strict: a change to an object without our
 * tags is refused (`NotOwnedError`); an operation on an object that is missing, or a creation of one that
 * exists, means the plan was made against another state (`ConcurrentChangeError`: read and plan again).
 */
export function applyOperations(state: RawState, operations: readonly Operation[]): RawState {
  const cloned = structuredClone(state);
  // By name, in listing order (a Map keeps insertion order): one lookup per operation, not one scan.
  const frontends = new Map(cloned.frontends.map((f) => [f.name, f]));
  const backends = new Map(cloned.backends.map((b) => [b.name, b]));
  const find = <T extends { name: string; tags: RawState['frontends'][number]['tags'] }>(
    items: Map<string, T> | T[],
    name: string,
    what: string,
  ): T => {
    const item = items instanceof Map ? items.get(name) : items.find((x) => x.name === name);
    if (!item) throw new ConcurrentChangeError(`${what} ${name} is not there any more`);
    if (!isOwned(item.tags))
      throw new NotOwnedError(`refusing to change ${what} ${name}: not owned by this service`);
    return item;
  };
  const absent = (items: Map<string, unknown> | Array<{ name: string }>, name: string, what: string) => {
    const there = items instanceof Map ? items.has(name) : items.some((x) => x.name === name);
    if (there) throw new ConcurrentChangeError(`${what} ${name} exists already`);
  };
  const noProxy = (name: string) => {
    absent(frontends, name, 'frontend');
    absent(backends, name, 'backend');
  };

  for (const op of operations) {
    switch (op.kind) {
      case 'create_frontend': {
        noProxy(op.frontend.name);
        const { name, bind, inspectDelayMs, defaultBackend } = op.frontend;
        frontends.set(name, {
          name,
          bind,
          inspectDelayMs,
          defaultBackend,
          acceptsTlsHello: true,
          rules: [],
          tags: ownerTags(),
        });
        break;
      }
      case 'update_frontend': {
        const { bind, inspectDelayMs, defaultBackend } = op.frontend;
        Object.assign(find(frontends, op.frontend.name, 'frontend'), {
          bind,
          inspectDelayMs,
          defaultBackend,
          acceptsTlsHello: true,
        });
        break;
      }
      case 'delete_frontend':
        find(frontends, op.name, 'frontend');
        frontends.delete(op.name);
        break;
      case 'create_backend':
        noProxy(op.backend.name);
        backends.set(op.backend.name, {
          name: op.backend.name,
          balance: op.backend.balance,
          servers: [],
          tags: ownerTags(op.backend.cluster),
        });
        break;
      case 'update_backend':
        Object.assign(find(backends, op.backend.name, 'backend'), {
          balance: op.backend.balance,
          tags: ownerTags(op.backend.cluster),
        });
        break;
      case 'delete_backend':
        find(backends, op.name, 'backend');
        backends.delete(op.name);
        break;
      case 'create_server': {
        const b = find(backends, op.backend, 'backend');
        absent(b.servers, op.server.name, `server ${op.backend}/`);
        const { name, address, port, check } = op.server;
        b.servers.push({ name, address, port, check, tags: ownerTags() });
        break;
      }
      case 'update_server': {
        const b = find(backends, op.backend, 'backend');
        const s: RawServer = find(b.servers, op.server.name, `server ${op.backend}/`);
        Object.assign(s, { address: op.server.address, port: op.server.port, check: op.server.check });
        break;
      }
      case 'delete_server': {
        const b = find(backends, op.backend, 'backend');
        find(b.servers, op.server.name, `server ${op.backend}/`);
        b.servers = b.servers.filter((s) => s.name !== op.server.name);
        break;
      }
      case 'set_switching_rules': {
        const f = find(frontends, op.frontend, 'frontend');
        // Foreign rules keep their own tags; the plan names them only to keep their place.
        const foreign = f.rules.filter((r) => !isOwned(r.tags));
        f.rules = op.rules.map((r): RawRule => {
          if (r.owned) return { backend: r.backend, host: r.host, tags: ownerTags() };
          const kept = foreign.find((x) => x.backend === r.backend && x.host === r.host);
          if (!kept)
            throw new ConcurrentChangeError(`foreign rule ${r.backend}/${r.host} is not in ${op.frontend}`);
          return kept;
        });
        break;
      }
    }
  }
  return { frontends: [...frontends.values()], backends: [...backends.values()] };
}
