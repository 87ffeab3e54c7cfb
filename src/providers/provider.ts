import type { Logger } from 'pino';
import type { Owner, RawState } from '../haproxy/model.js';
import type { Plan } from '../plan/plan.js';

export interface ApplyReport {
  /** `succeeded` when the change needed a reload and HAProxy reported it done; `none` for runtime-only changes. */
  reload: 'none' | 'succeeded';
  /** Requests (or runtime commands) sent to HAProxy for this apply. */
  requests: number;
}

/**
 * What a provider sent to HAProxy and got back, reads included: every Data Plane API request, or every
 * master-CLI command (and, for the stock provider, the owned file's bytes when it is written).
 */
export interface ProviderTraffic {
  request(): void;
  bytes(direction: 'sent' | 'received', n: number): void;
}

/** Traffic that nobody counts. */
export const UNCOUNTED: ProviderTraffic = { request() {}, bytes() {} };

/** What the factory hands every provider besides its own settings. */
export interface ProviderDeps {
  logger: Logger;
  /** Whose tags the provider writes (the registry); the composition root wraps the provider with it. */
  owner: Owner;
  /** A directory the provider may keep small files in (the state file's): e.g. the open-transaction ledger. */
  stateDir?: string;
  /** Counts what the provider sends to HAProxy (the service feeds its metrics). */
  traffic?: ProviderTraffic;
  /**
   * Map routing: how long after a runtime change (of the last in a batch) the files HAProxy loads are
   * brought in line, without a reload; never later than max(1 s, this) after the first. Default 500 (KUBEBYON_PERSIST_DELAY_MS).
   */
  persistDelayMs?: number;
}

/** What `ping` learned of the HAProxy behind the provider, for readiness and the start log. */
export interface ProviderInfo {
  /** e.g. `HAProxy 3.0.11` or `Data Plane API v3.4.0`. */
  version: string;
  /** Where the provider reaches HAProxy (an URL or a socket path). */
  endpoint: string;
}

/**
 * Where plans are applied. Providers do plain I/O: they read HAProxy's objects with their tags, store the
 * owner's tags (`Owner.tags()`, given at construction) with every object a plan creates, and never change an
 * object the plan does not name. Ownership is decided by `src/registry/registry.ts` and enforced before a
 * plan reaches a provider by `src/registry/owned-provider.ts`; what each operation means is
 * `src/plan/apply.ts`.
 *
 * Contract (checked for every provider by `test/contract/provider-contract.ts`):
 * - `apply(plan, current)` is handed the state the plan was made from (a `readState` answer of the same
 *   provider; a provider may keep what it learned in that read, keyed by that object, and must read again when
 *   HAProxy moved since). It applies a non-empty plan as one unit, or not at all; after it,
 *   `interpret(readState())` equals the oracle's `applyToState(before, plan.operations)`. An empty plan writes
 *   nothing. One exception, stated and tested: the Data Plane API's runtime path sends one request per server
 *   moved, with no undo; when one fails, the moves before it stay applied, the rest are not, and the error
 *   makes the loop plan again from a fresh read, which finishes the move (`test/unit/dataplaneapi-provider`).
 * - Every call honours its `AbortSignal`: an aborted call rejects promptly and leaves HAProxy as it was.
 * - Errors that retrying cannot fix are `TerminalError`s; `ConcurrentChangeError` asks for re-read and re-plan;
 *   anything else is transient and retried with backoff.
 */
/** How fresh a read must be. */
export interface ReadOptions {
  /**
   * Read everything HAProxy runs (servers, map entries), so drift made by hand at runtime is seen: periodic
   * resyncs ask for it. Without it a provider may answer from what its own last read and applies left, when
   * it can prove nothing else changed HAProxy since (same worker, no reload, same files).
   */
  fresh?: boolean;
}

export interface Provider {
  /** `dataplaneapi`, `haproxy` or `memory`: the metrics and logs name it. */
  readonly name: string;
  readState(signal: AbortSignal, options?: ReadOptions): Promise<RawState>;
  apply(plan: Plan, current: RawState, signal: AbortSignal): Promise<ApplyReport>;
  /** A cheap request that proves HAProxy answers, for readiness. */
  ping(signal: AbortSignal): Promise<ProviderInfo>;
  /**
   * A cheap token that changes whenever HAProxy may have lost or changed what runs at runtime behind the
   * provider's back (a reload or restart by anyone: e.g. the master's reload count and worker pid). The
   * reconciler polls it and runs a fresh pass when it changes, so routes a reload forgot come back at once.
   */
  revision?(signal: AbortSignal): Promise<string>;
  /**
   * Releases connections and timers; what runtime applies left unwritten to HAProxy's files is written
   * first, unless `persist` is false (a replica that lost the lead: only the leader writes).
   */
  close?(options?: CloseOptions): Promise<void>;
}

/** Options of `close`: `persist: false` for a replica that lost the lead (only the leader writes). */
export interface CloseOptions {
  persist?: boolean;
}
