import type { Logger } from 'pino';
import type { ProviderInfo } from '../providers/provider.js';
import type { Reconciler } from '../reconcile/reconciler.js';
import { Backoff } from '../timing/backoff.js';
import { type Clock, systemClock } from '../timing/clock.js';

/** One HAProxy instance the service drives: its name, and what it is (a change of `key` makes a new lane). */
export interface InstanceTarget {
  name: string;
  /** Its URL, or its socket and files. */
  key: string;
}

/** One instance's own level-triggered loop, with its provider. */
export interface Lane {
  loop: Reconciler;
  ping(signal: AbortSignal): Promise<ProviderInfo>;
  /**
   * Stops the loop (a pass in flight gets `graceMs`) and the provider, which writes what runtime applies left
   * unwritten unless `persist` is false; removes the lane's metrics.
   */
  close(graceMs: number, persist: boolean): Promise<void>;
}

const MIN_RETRY_MS = 1_000;
const MAX_RETRY_MS = 30_000;

/**
 * The lanes there are, and the ones being made. Making one can take its provider's whole timeout (an API that
 * does not answer), so lanes are made side by side and nobody waits for them but the caller of `set`; one
 * that could not be made is tried again with backoff while it is still wanted.
 */
export class LaneSet<T extends InstanceTarget> {
  private readonly lanes = new Map<string, { target: T; lane: Lane }>();
  private readonly starting = new Map<string, Promise<void>>();
  private wanted: T[] = [];
  /** Removals run one after another. */
  private changing: Promise<void> = Promise.resolve();
  private retry: (() => void) | undefined;
  private readonly backoff = new Backoff(MIN_RETRY_MS, MAX_RETRY_MS);

  constructor(
    private readonly make: (target: T) => Promise<Lane>,
    private readonly logger: Logger,
    private readonly clock: Clock = systemClock,
  ) {}

  /** The lanes, in the order the instances were given. */
  entries(): Array<[string, Lane]> {
    return this.all().flatMap(([name, lane]) => (lane ? [[name, lane] as [string, Lane]] : []));
  }

  /** Instances wanted whose lane is not made yet. */
  startingNames(): string[] {
    return this.all().flatMap(([name, lane]) => (lane ? [] : [name]));
  }

  /** Every instance wanted, in the order given, with its lane once made. */
  all(): Array<[string, Lane | undefined]> {
    return this.wanted.flatMap((t): Array<[string, Lane | undefined]> => {
      const made = this.lanes.get(t.name);
      if (made?.target.key === t.key) return [[t.name, made.lane]];
      return this.starting.has(t.name) ? [[t.name, undefined]] : [];
    });
  }

  get size(): number {
    return this.lanes.size;
  }

  /** Waits for removals under way; and, while there is no lane at all, for the ones being made. */
  async settled(): Promise<void> {
    await this.changing;
    if (this.lanes.size === 0 && this.starting.size > 0) await Promise.allSettled(this.starting.values());
  }

  /** Drives `wanted`; resolves once the others are closed and the new ones made (or failed, to be retried). */
  async set(wanted: T[], graceMs: number, persist: boolean): Promise<void> {
    this.wanted = wanted;
    if (wanted.length === 0) {
      this.retry?.();
      this.retry = undefined;
    }
    const removal = this.changing.then(async () => {
      const gone = [...this.lanes].filter(([name, { target }]) => !this.isWanted(name, target.key));
      await Promise.all(
        gone.map(async ([name, { lane }]) => {
          this.lanes.delete(name);
          await lane
            .close(graceMs, persist)
            .catch((err: unknown) => this.logger.warn({ err, haproxy: name }, 'lane did not close cleanly'));
          this.logger.info({ haproxy: name }, 'HAProxy instance no longer driven');
        }),
      );
    });
    this.changing = removal.catch((err: unknown) => this.logger.error({ err }, 'removing lanes failed'));
    await this.changing;
    await this.startMissing();
  }

  private isWanted(name: string, key: string): boolean {
    return this.wanted.some((t) => t.name === name && t.key === key);
  }

  private startMissing(): Promise<void> {
    const made: Promise<void>[] = [];
    for (const target of this.wanted) {
      if (this.lanes.has(target.name) || this.starting.has(target.name)) continue;
      const making = this.make(target).then(
        async (lane) => {
          this.starting.delete(target.name);
          // No longer wanted (standby, the pod went) while it was made: it goes at once, writing nothing (a
          // replica that stands by must not write HAProxy's files: the leader does).
          if (!this.isWanted(target.name, target.key) || this.lanes.has(target.name)) {
            await lane.close(0, false).catch(() => {});
            if (this.wanted.some((t) => t.name === target.name)) void this.startMissing();
            return;
          }
          this.lanes.set(target.name, { target, lane });
          this.backoff.reset();
          this.logger.info({ haproxy: target.name }, 'HAProxy instance driven');
        },
        (err: unknown) => {
          this.starting.delete(target.name);
          this.logger.error(
            { err, haproxy: target.name, retryInMs: this.backoff.peek() },
            'HAProxy instance not driven',
          );
          this.retryLater();
        },
      );
      this.starting.set(target.name, making);
      made.push(making);
    }
    return Promise.all(made).then(() => {});
  }

  private retryLater(): void {
    if (this.retry || this.wanted.length === 0) return;
    this.retry = this.clock.after(this.backoff.next(), () => {
      this.retry = undefined;
      void this.startMissing();
    });
  }
}
