import type { HaproxyState } from '../haproxy/model.js';
import type { Plan } from '../plan/plan.js';

export interface ApplyReport {
  /** `succeeded` when the change needed a reload and HAProxy reported it done; `none` for runtime-only changes. */
  reload: 'none' | 'succeeded';
}

/**
 * Where plans are applied: HAProxy through its Data Plane API. `apply` applies a non-empty plan as one unit
 * (one transaction) or not at all.
 */
export interface Provider {
  readState(): Promise<HaproxyState>;
  apply(plan: Plan): Promise<ApplyReport>;
  /** A cheap request that proves HAProxy's API answers, for readiness. */
  ping(): Promise<void>;
}

/** Someone else changed HAProxy's configuration meanwhile: read again, plan again, try again. */
export class ConcurrentChangeError extends Error {
  override readonly name = 'ConcurrentChangeError';
}

/** The change was committed but HAProxy could not load it; HAProxy keeps running its previous configuration. */
export class ReloadFailedError extends Error {
  override readonly name = 'ReloadFailedError';
}
