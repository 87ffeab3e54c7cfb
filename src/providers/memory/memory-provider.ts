import { cloneRawState, type Owner, type RawState } from '../../haproxy/model.js';
import { applyOperations } from '../../plan/apply.js';
import type { Plan } from '../../plan/plan.js';
import { Registry } from '../../registry/registry.js';
import type { ApplyReport, Provider, ProviderInfo, ReadOptions } from '../provider.js';

/**
 * The reference provider: HAProxy's objects in memory, applied strictly through `applyOperations` (an
 * operation on a missing object throws and leaves the state as it was). Like external-dns's
 * `provider/inmemory`, it pins the contract that the real providers are checked against, and serves unit
 * tests of the reconcile loop; no configuration selects it.
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
  /** What `revision` answers: a test changes it to play a reload by someone else. */
  revisionToken = '';
  /** The options of every `readState` call, in order. */
  readOptions: ReadOptions[] = [];
  /** The state as this provider last made it (a read's copy or an apply's result). */
  private applied: RawState | undefined;

  constructor(
    public state: RawState = { frontends: [], backends: [] },
    private readonly owner: Owner = new Registry(),
  ) {}

  async ping(signal: AbortSignal): Promise<ProviderInfo> {
    signal.throwIfAborted();
    if (this.down) throw this.down;
    return { version: 'memory', endpoint: 'memory' };
  }

  async revision(signal: AbortSignal): Promise<string> {
    signal.throwIfAborted();
    if (this.down) throw this.down;
    return this.revisionToken;
  }

  async readState(signal: AbortSignal, options: ReadOptions = {}): Promise<RawState> {
    signal.throwIfAborted();
    if (this.down) throw this.down;
    this.reads++;
    this.readOptions.push(options);
    // Like the stock provider's cached read: without `fresh`, what the last apply left, as it is (states are
    // never changed in place), so that a pass on a large state does not pay for a copy of it. A fresh read,
    // or one after `state` was set by hand, is a copy the provider goes on from: what was done to the old
    // object by hand is in it, and nothing kept about the old object applies to it.
    if (options.fresh || this.state !== this.applied) {
      this.state = cloneRawState(this.state);
      this.applied = this.state;
    }
    return this.state;
  }

  async apply(plan: Plan, _current: RawState, signal: AbortSignal): Promise<ApplyReport> {
    if (this.gate) await untilAborted(this.gate, signal);
    signal.throwIfAborted();
    if (this.down) throw this.down;
    const failure = this.failures.shift();
    if (failure) throw failure;
    if (plan.operations.length === 0) return { reload: 'none', requests: 0 };
    // All or nothing: applyOperations works on a copy, kept only when every operation succeeded.
    this.state = applyOperations(this.state, plan.operations, this.owner);
    this.applied = this.state;
    this.applies.push(plan);
    // As the real providers: server moves, and with map routing map entries and slots' servers, are runtime.
    const runtime = new Set<string>(['update_server']);
    if (plan.pool)
      for (const k of ['set_map_entry', 'delete_map_entry', 'create_server', 'delete_server']) runtime.add(k);
    const runtimeOnly = plan.operations.every((op) => runtime.has(op.kind));
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
