import type { HaproxyState } from '../../src/haproxy/model.js';
import { applyToState } from '../../src/plan/apply-to-state.js';
import type { Plan } from '../../src/plan/plan.js';
import type { ApplyReport, Provider } from '../../src/reconcile/provider.js';

/**
 * A provider that keeps HAProxy's state in memory, for unit tests of the reconcile loop's own logic
 * (coalescing, retries, status). It says nothing about HAProxy: integration tests use the real one.
 */
export class MemoryProvider implements Provider {
  applies: Plan[] = [];
  reads = 0;
  /** Errors thrown by the next apply calls, in order. */
  failures: Error[] = [];

  constructor(public state: HaproxyState = { frontends: [], backends: [] }) {}

  /** When set, ping fails with it: HAProxy's API is unreachable. */
  down: Error | undefined;

  async ping(): Promise<void> {
    if (this.down) throw this.down;
  }

  async readState(): Promise<HaproxyState> {
    this.reads++;
    return structuredClone(this.state);
  }

  async apply(plan: Plan): Promise<ApplyReport> {
    const failure = this.failures.shift();
    if (failure) throw failure;
    this.state = applyToState(this.state, plan.operations);
    this.applies.push(plan);
    return { reload: 'succeeded' };
  }
}
