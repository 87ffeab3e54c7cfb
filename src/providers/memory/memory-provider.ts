import type { RawBackend, RawFrontend, RawRule, RawState } from '../../haproxy/model.js';
import type { Operation, Plan } from '../../plan/plan.js';
import { isOwned, ownerTags } from '../../registry/ownership.js';
import type { ApplyReport, Provider, ProviderInfo } from '../provider.js';

/**
 * The reference provider: HAProxy's objects in memory, applied strictly (an operation on a missing object, or
 * a change to an object without our tags, throws and leaves the state as it was). Like external-dns's
 * `provider/inmemory`, it pins the contract that the real providers are checked against, and serves unit
 * tests of the reconcile loop.
 */
export class MemoryProvider implements Provider {
  readonly name = 'memory';
  applies: Plan[] = [];
  reads = 0;
  /** Errors thrown by the next apply calls, in order. */
  failures: Error[] = [];
  /** When set, every call fails with it: HAProxy is unreachable. */
  down: Error | undefined;
  /** When set, `apply` waits for it before writing (to hold a pass in flight). */
  gate: Promise<void> | undefined;

  constructor(public state: RawState = { frontends: [], backends: [] }) {}

  async ping(signal: AbortSignal): Promise<ProviderInfo> {
    signal.throwIfAborted();
    if (this.down) throw this.down;
    return { version: 'memory', endpoint: 'memory' };
  }

  async readState(signal: AbortSignal): Promise<RawState> {
    signal.throwIfAborted();
    if (this.down) throw this.down;
    this.reads++;
    return structuredClone(this.state);
  }

  async apply(plan: Plan, signal: AbortSignal): Promise<ApplyReport> {
    if (this.gate) await untilAborted(this.gate, signal);
    signal.throwIfAborted();
    if (this.down) throw this.down;
    const failure = this.failures.shift();
    if (failure) throw failure;
    if (plan.operations.length === 0) return { reload: 'none', requests: 0 };
    // All or nothing: apply to a copy, keep it only if every operation succeeded.
    const next = structuredClone(this.state);
    for (const op of plan.operations) applyRaw(next, op);
    this.state = next;
    this.applies.push(plan);
    const runtimeOnly = plan.operations.every((op) => op.kind === 'update_server');
    return { reload: runtimeOnly ? 'none' : 'succeeded', requests: plan.operations.length };
  }
}

// A held apply still honours its signal, as a real provider's request would.
function untilAborted(gate: Promise<void>, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    if (signal.aborted) return onAbort();
    signal.addEventListener('abort', onAbort, { once: true });
    gate.then(() => {
      signal.removeEventListener('abort', onAbort);
      resolve();
    }, reject);
  });
}

function owned<T extends { name: string; tags: RawFrontend['tags'] }>(items: T[], name: string): T {
  const item = items.find((x) => x.name === name);
  if (!item) throw new Error(`missing object ${name}`);
  if (!isOwned(item.tags)) throw new Error(`refusing to change ${name}: not owned`);
  return item;
}

function absent(items: Array<{ name: string }>, name: string): void {
  if (items.some((x) => x.name === name)) throw new Error(`object already exists: ${name}`);
}

function applyRaw(state: RawState, op: Operation): void {
  switch (op.kind) {
    case 'create_frontend': {
      absent(state.frontends, op.frontend.name);
      const { name, bind, inspectDelayMs, defaultBackend } = op.frontend;
      state.frontends.push({
        name,
        bind,
        inspectDelayMs,
        defaultBackend,
        acceptsTlsHello: true,
        rules: [],
        tags: ownerTags(),
      });
      return;
    }
    case 'update_frontend': {
      const { bind, inspectDelayMs, defaultBackend } = op.frontend;
      Object.assign(owned(state.frontends, op.frontend.name), {
        bind,
        inspectDelayMs,
        defaultBackend,
        acceptsTlsHello: true,
      });
      return;
    }
    case 'delete_frontend':
      owned(state.frontends, op.name);
      state.frontends = state.frontends.filter((f) => f.name !== op.name);
      return;
    case 'create_backend':
      absent(state.backends, op.backend.name);
      state.backends.push({
        name: op.backend.name,
        balance: op.backend.balance,
        servers: [],
        tags: ownerTags(op.backend.cluster),
      });
      return;
    case 'update_backend':
      Object.assign(owned(state.backends, op.backend.name), {
        balance: op.backend.balance,
        tags: ownerTags(op.backend.cluster),
      });
      return;
    case 'delete_backend':
      owned(state.backends, op.name);
      state.backends = state.backends.filter((b) => b.name !== op.name);
      return;
    case 'create_server': {
      const b: RawBackend = owned(state.backends, op.backend);
      absent(b.servers, op.server.name);
      const { name, address, port, check } = op.server;
      b.servers.push({ name, address, port, check, tags: ownerTags() });
      return;
    }
    case 'update_server': {
      const b = owned(state.backends, op.backend);
      const s = owned(b.servers, op.server.name);
      Object.assign(s, { address: op.server.address, port: op.server.port, check: op.server.check });
      return;
    }
    case 'delete_server': {
      const b = owned(state.backends, op.backend);
      owned(b.servers, op.server.name);
      b.servers = b.servers.filter((s) => s.name !== op.server.name);
      return;
    }
    case 'set_switching_rules': {
      const f = owned(state.frontends, op.frontend);
      // Foreign rules keep their own tags; the plan only names them to keep their place.
      const foreign = f.rules.filter((r) => !isOwned(r.tags));
      f.rules = op.rules.map((r): RawRule => {
        if (r.owned) return { backend: r.backend, host: r.host, tags: ownerTags() };
        const kept = foreign.find((x) => x.backend === r.backend && x.host === r.host);
        if (!kept) throw new Error(`foreign rule ${r.backend}/${r.host} is not in ${op.frontend}`);
        return kept;
      });
      return;
    }
  }
}
