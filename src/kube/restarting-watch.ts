import type { Logger } from 'pino';
import type { Metrics } from '../metrics/metrics.js';
import { Backoff } from '../timing/backoff.js';
import { type Clock, systemClock } from '../timing/clock.js';
import { describeError } from './errors.js';

const MIN_RESTART_MS = 500;
const MAX_RESTART_MS = 30_000;

/** What of client-node's informer this needs. */
interface StartableInformer {
  start(): Promise<void>;
  stop(): Promise<void>;
  on(verb: 'error', cb: (err: unknown) => void): void;
}

export interface RestartingWatchOptions {
  /** The `resource` label of the watch metrics, and the log's. */
  resource: string;
  logger: Logger;
  metrics?: Pick<Metrics, 'kubernetesWatchUp' | 'kubernetesWatchErrors'> | undefined;
  /** What stays while the watch is down, for the log line (e.g. "the last known clusters"). */
  keeps: string;
  /** After each list that went through: the first one, or one after a failure. */
  synced?(first: boolean, recovered: boolean): void;
  clock?: Clock;
}

/**
 * A list-watch kept running: a failure marks it down, keeps every cached object (what routes is never wiped
 * because the API went away), and starts it again with a delay that doubles from 0.5 s to 30 s. One rule for
 * the topology's nodes and Services, the HAProxy pods and the ClusterRoutes.
 */
export class RestartingWatch {
  up = false;
  /** The first list went through: the cache is the cluster's truth from then on. */
  synced = false;
  lastError: string | undefined;
  private readonly backoff = new Backoff(MIN_RESTART_MS, MAX_RESTART_MS);
  private readonly timers = new Set<() => void>();
  private stopped = false;
  private failures = 0;

  constructor(
    private readonly informer: StartableInformer,
    private readonly o: RestartingWatchOptions,
  ) {
    // 'connect' is not taken as "up": the informer says it before listing, also when the list then fails.
    informer.on('error', (err) => this.failed(err));
  }

  /** Starts it; resolves after the first attempt (`synced` says whether it went through). */
  start(): Promise<void> {
    return this.run();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    for (const cancel of this.timers) cancel();
    this.timers.clear();
    await this.informer.stop();
  }

  /** For readiness: connected, or the last error. */
  health(): { ok: boolean; detail?: string } {
    return this.up ? { ok: true } : { ok: false, detail: this.lastError ?? 'not connected yet' };
  }

  private failed(err: unknown): void {
    const { resource, logger, metrics } = this.o;
    this.up = false;
    this.failures++;
    this.lastError = describeError(err);
    metrics?.kubernetesWatchUp.set({ resource }, 0);
    metrics?.kubernetesWatchErrors.inc({ resource });
    if (this.stopped) return;
    const retryInMs = this.backoff.next();
    logger.warn(
      { resource, err: this.lastError, retryInMs },
      `kubernetes watch failed; keeping ${this.o.keeps}`,
    );
    const cancel = (this.o.clock ?? systemClock).after(retryInMs, () => {
      this.timers.delete(cancel);
      void this.run();
    });
    this.timers.add(cancel);
  }

  private async run(): Promise<void> {
    if (this.stopped) return;
    const failuresBefore = this.failures;
    const recovered = this.lastError !== undefined;
    try {
      await this.informer.start();
    } catch (err) {
      // The list went through but opening the watch threw: same handling as a watch that broke.
      this.failed(err);
      return;
    }
    if (this.failures !== failuresBefore || this.stopped) return;
    const first = !this.synced;
    this.synced = true;
    this.up = true;
    this.lastError = undefined;
    this.backoff.reset();
    this.o.metrics?.kubernetesWatchUp.set({ resource: this.o.resource }, 1);
    if (recovered) this.o.logger.info({ resource: this.o.resource }, 'kubernetes watch is back');
    this.o.synced?.(first, recovered);
  }
}
