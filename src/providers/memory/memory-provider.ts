import type { RawState } from '../../haproxy/model.js';
import { ConcurrentChangeError } from '../../model/errors.js';
import type { Plan } from '../../plan/plan.js';
import type { ApplyReport, Change, Provider, ProviderInfo, RawRead } from '../provider.js';

/**
 * The reference provider: HAProxy's objects in memory, a change's target (`applyOperations`, which throws on
 * an operation on a missing object and so leaves the state as it was) kept as it is. Like external-dns's
 * `provider/inmemory`, it pins the contract that the real providers are checked against, and serves unit
 * tests of the reconcile loop; `KUBEBYON_PROVIDER=memory` runs the service on it, to try the webhook API.
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
  /**
   * What `revision` answers: a test changes it to play a reload by someone else. Setting `state` by hand
   * moves it too (someone else changed HAProxy).
   */
  revisionToken = '';
  private handSet = 0;
  private stateNow: RawState;

  constructor(state: RawState = { frontends: [], backends: [] }) {
    this.stateNow = state;
  }

  /** What HAProxy has; a test sets it to play a change by someone else. */
  get state(): RawState {
    return this.stateNow;
  }

  set state(state: RawState) {
    this.stateNow = state;
    this.handSet++;
  }

  async ping(signal: AbortSignal): Promise<ProviderInfo> {
    signal.throwIfAborted();
    if (this.down) throw this.down;
    return { version: 'memory', endpoint: 'memory' };
  }

  async revision(signal: AbortSignal): Promise<string> {
    signal.throwIfAborted();
    if (this.down) throw this.down;
    return `${this.revisionToken}:${this.handSet}`;
  }

  async read(signal: AbortSignal): Promise<RawRead> {
    const revision = await this.revision(signal);
    this.reads++;
    return { raw: this.stateNow, revision };
  }

  async apply(plan: Plan, change: Change, signal: AbortSignal): Promise<ApplyReport> {
    if (this.gate) await untilAborted(this.gate, signal);
    signal.throwIfAborted();
    if (this.down) throw this.down;
    const failure = this.failures.shift();
    if (failure) throw failure;
    const revision = await this.revision(signal);
    if (plan.operations.length === 0) return { reload: 'none', requests: 0, revision };
    // Changed by hand since the reading: the plan was made from another state (read and plan again).
    if (revision !== change.revision) throw new ConcurrentChangeError('the state was changed meanwhile');
    this.stateNow = change.to.state;
    this.applies.push(plan);
    // As the real providers: map entries and slots' servers change at runtime, the rest reloads.
    const runtimeOnly = plan.operations.every((op) => RUNTIME.has(op.kind));
    return { reload: runtimeOnly ? 'none' : 'succeeded', requests: plan.operations.length, revision };
  }
}

const RUNTIME = new Set([
  'update_server',
  'set_map_entry',
  'delete_map_entry',
  'create_server',
  'delete_server',
  'add_allow_entry',
  'delete_allow_entry',
]);

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
