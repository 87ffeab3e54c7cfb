import type { Logger } from 'pino';
import type { RawState, Tagger } from '../haproxy/model.js';
import type { Plan } from '../plan/plan.js';
import type { Reading } from '../plan/reading.js';
import type { Clock } from '../timing/clock.js';

export interface ApplyReport {
  /** `succeeded` when the change needed a reload and HAProxy reported it done; `none` for runtime-only changes. */
  reload: 'none' | 'succeeded';
  /** Requests (or runtime commands) sent to HAProxy for this apply. */
  requests: number;
  /**
   * Set when HAProxy now runs exactly the change's target, and nothing else changed it meanwhile: the
   * provider's revision with the change applied. The registry then answers the next reads from the target
   * for as long as the revision stays (no read of every slot after each change).
   */
  revision?: string;
}

/** A read: everything of HAProxy the service reasons about, and the revision it is current at. */
export interface RawRead {
  raw: RawState;
  revision: string;
}

/** A plan's change: the reading it was made from, and that reading with the plan applied (`Reading.derive`). */
export interface Change {
  readonly from: Reading;
  readonly to: Reading;
  /**
   * The provider's revision `from` is current at: when the revision has moved since, the plan was made from
   * a state HAProxy no longer has, and the provider reads again (or answers `ConcurrentChangeError`).
   */
  readonly revision: string;
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
  owner: Tagger;
  /** A directory the provider may keep small files in (the state file's): e.g. where an older release kept its open-transaction ledger, swept at start. */
  stateDir?: string;
  /** Counts what the provider sends to HAProxy (the service feeds its metrics). */
  traffic?: ProviderTraffic;
  /**
   * Map routing: how long after a runtime change (of the last in a batch) the files HAProxy loads are
   * brought in line, without a reload; never later than max(1 s, this) after the first (default `PERSIST_DELAY_MS`).
   */
  persistDelayMs?: number;
  /** The clock of the provider's timers (persistence): tests fake it. */
  clock?: Clock;
}

/** What `ping` learned of the HAProxy behind the provider, for readiness and the start log. */
export interface ProviderInfo {
  /** e.g. `HAProxy 3.0.11` or `Data Plane API v3.4.0`. */
  version: string;
  /** Where the provider reaches HAProxy (an URL or a socket path). */
  endpoint: string;
}

/**
 * Where plans are applied. Providers do plain I/O: they read HAProxy's objects with the tags stored with
 * them, store the owner's tags (`Tagger.tags()`, given at construction) with every object a plan creates,
 * and never change an object the plan does not name. They never decide ownership: the registry
 * (`src/registry/registry.ts`) interprets every read, and `src/registry/owned-provider.ts` hands a provider
 * only plans it has checked, with the interpreted reading they were made from. What each operation means is
 * `src/plan/apply.ts`; the change's target (`change.to`) is that, already computed.
 *
 * Contract (checked for every provider by `test/contract/provider-contract.ts`):
 * - `apply(plan, change)` applies a non-empty plan as one unit, or not at all; after it, a read interprets to
 *   `change.to.state`. An empty plan writes nothing. One exception, stated and tested: the Data Plane API's
 *   runtime path sends one request per step, with no undo; when one fails, the steps before it stay applied,
 *   and the error makes the loop plan again from a fresh read, which finishes the change.
 * - Every call honours its `AbortSignal`: an aborted call rejects promptly and leaves HAProxy as it was.
 * - Errors that retrying cannot fix are `TerminalError`s; `ConcurrentChangeError` asks for re-read and re-plan;
 *   anything else is transient and retried with backoff.
 */
export interface Provider {
  /** `dataplaneapi`, `haproxy` or `memory`: the metrics and logs name it. */
  readonly name: string;
  /** Everything HAProxy runs that the service reasons about (servers and map entries as they run). */
  read(signal: AbortSignal): Promise<RawRead>;
  /**
   * A cheap token that changes whenever HAProxy may run something this provider did not make it run: a
   * reload or restart by anyone else (what runs at runtime is then lost), a change of the configuration by
   * someone else. The provider's own applies and file writes do not move it past what they report.
   */
  revision(signal: AbortSignal): Promise<string>;
  apply(plan: Plan, change: Change, signal: AbortSignal): Promise<ApplyReport>;
  /**
   * After a full read, interpreted: the files HAProxy loads are brought in line with what `reading` says
   * runs, for the owned objects (a crash or a reload before the last persistence leaves them behind).
   */
  settle?(reading: Reading, signal: AbortSignal): Promise<void>;
  /**
   * Connections authorized networks refused, per slot backend, since HAProxy last loaded its configuration:
   * the entries of the refusals table `table` (`src/haproxy/edge.ts`). Read at a scrape of `/metrics`.
   */
  refusals?(table: string, signal: AbortSignal): Promise<Map<string, number>>;
  /** A cheap request that proves HAProxy answers, for readiness. */
  ping(signal: AbortSignal): Promise<ProviderInfo>;
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
