import type { Logger } from 'pino';
import type { RenderOptions } from '../haproxy/render.js';
import type { Metrics } from '../metrics/metrics.js';
import type { Plan } from '../plan/plan.js';
import type { OwnedProvider } from '../registry/owned-provider.js';
import type { DesiredStore } from '../store/desired-store.js';
import type { Clock } from '../timing/clock.js';
import type { Topology } from '../topology/topology.js';
import type { RouteBackend } from './routing.js';
import type { ClusterStatus } from './status.js';

/**
 * The loop's timings: constants, each chosen by a measurement (they were settings; `settings.ts` lists them
 * as retired).
 * - `debounceMs` 0: the first change after a quiet spell is applied at once, and changes that arrive during
 *   a pass go together into the next. A pass for a few clusters costs about a millisecond at any N (a new
 *   cluster is routable in 6-17 ms p50 at N = 10 to 20000, `bench/results/zero-reload.md`): waiting first
 *   would only add to that. A burst of 1000 changes still costs a handful of passes (1.4-2.4 s in all).
 * - `maxDelayMs` 2000: a steady stream of changes less than the debounce apart holds a pass back no longer.
 * - `retries` 5: re-reads within one pass when HAProxy changed meanwhile; more have never been needed in
 *   the two-owner tests (two adapters writing one HAProxy), fewer made a pass give up on a busy API.
 * - `watchMs` 500: a reload by someone else before persistence is seen by the next poll, and the lost route
 *   answers again 33-65 ms after it (`docs/RELIABILITY.md`); each poll is one or two cheap requests.
 */
export const LOOP = { debounceMs: 0, maxDelayMs: 2000, retries: 5, watchMs: 500 } as const;

export interface ReconcilerOptions {
  store: Pick<DesiredStore, 'list' | 'get'>;
  topology: Topology;
  provider: OwnedProvider;
  render: RenderOptions;
  metrics: Metrics;
  logger: Logger;
  /** Quiet time after the last event before a pass starts: a burst of events becomes one pass. */
  debounceMs: number;
  /** Longest a steady stream of events can hold a pass back, counted from when the pass began to wait. */
  maxDelayMs: number;
  /** Periodic resync that repairs drift; 0 disables it. */
  resyncIntervalMs: number;
  /**
   * Times one pass reads, plans and applies again at once when HAProxy changed meanwhile; once they run out
   * the pass is backed off like any failure. Other errors are never tried again within a pass.
   */
  retries: number;
  /** Port users reach HAProxy on, for `api_endpoint`. */
  publicPort: number;
  /**
   * First delay before a failed pass is tried again by itself (doubles up to 30 s); a terminal error is not
   * tried again by itself. Default 1000; 0 disables it.
   */
  failureBackoffMs?: number;
  /**
   * After a transient failure, how often HAProxy (or its API) is pinged while it does not answer; the pass is
   * tried again as soon as it answers, instead of at the end of the backoff. Default 1000; 0 disables it.
   */
  recoveryProbeMs?: number;
  /**
   * How often the provider's revision token is read (`LOOP.watchMs`): a change (a reload or
   * restart by anyone) asks for a fresh pass (`haproxy_reloaded`). Default 0: not watched.
   */
  watchMs?: number;
  /** Told after each pass which clusters' statuses it may have changed (a leader publishes them). */
  passed?: (clusters: ReadonlySet<string> | 'all') => void;
  /** Time for debounce, delays, resync, backoff, the revision watch and `last_applied_at`; tests hand in their own. */
  clock?: Clock;
}

/** `GET /v1/plan` before the topology has been read: an unread topology is unknown, not empty. */
export class TopologyNotSyncedError extends Error {
  override readonly name = 'TopologyNotSyncedError';
  constructor() {
    super('the topology has not been read yet; a plan now would remove every server');
  }
}

export interface PassOutcome {
  ok: boolean;
  changed: boolean;
  error?: string;
}

/**
 * What the webhook API asks of the loop: one `Reconciler`, or a `Fleet` of them (one per HAProxy instance,
 * or none on a replica that does not lead).
 */
export interface Loop {
  request(reason: string, changed?: { clusters: readonly string[] }): Promise<PassOutcome>;
  status(name: string): ClusterStatus | undefined;
  statuses(): ClusterStatus[];
  preview(): Promise<{ plan: Plan; text: string; routes: Map<string, RouteBackend> }>;
}
