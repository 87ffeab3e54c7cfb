import type { Logger } from 'pino';
import { errorText } from '../model/errors.js';
import type { Clock } from '../timing/clock.js';

export interface RevisionWatchOptions {
  clock: Clock;
  /** Time between two reads of the token; 0 disables the watch. */
  intervalMs: number;
  /** The provider's revision token (`Provider.revision`). */
  revision(signal: AbortSignal): Promise<string>;
  /** Aborts a read in flight when the service stops. */
  signal: AbortSignal;
  /** Called when the token differs from the one read before, and is not one this service left (`ours`). */
  changed(): void;
  /** Whether a token is the one this service's own apply left HAProxy at (its own reload): nothing to read again. */
  ours?(token: string): boolean;
  logger: Logger;
  /** Longest one read may take before it counts as failed (default: 10 s, at least twice the interval). */
  timeoutMs?: number;
}

/**
 * Notices reloads and restarts of HAProxy by anyone: it reads the provider's revision token every
 * `intervalMs` and calls `changed` when the token moved since the read before (never for the first read),
 * so that the routes a reload lost come back within a poll and a pass. A read that fails is logged at debug
 * and the token before it is kept: a restart that made reads fail for a while is still seen once they answer.
 */
export class RevisionWatch {
  private last: string | undefined;
  private cancel: () => void = () => {};
  private stopped = false;

  constructor(private readonly o: RevisionWatchOptions) {}

  start(): void {
    if (this.o.intervalMs <= 0) return;
    // The first read at once: a reload between the first pass and a later first read would go unseen.
    this.cancel = this.o.clock.after(0, () => void this.poll());
  }

  stop(): void {
    this.stopped = true;
    this.cancel();
  }

  private async poll(): Promise<void> {
    try {
      const token = await this.read();
      if (this.last !== undefined && token !== this.last && !this.o.ours?.(token)) {
        this.o.logger.info({ from: this.last, to: token }, 'HAProxy reloaded or restarted; reading it again');
        this.o.changed();
      }
      this.last = token;
    } catch (err) {
      this.o.logger.debug({ err: errorText(err) }, 'cannot read the HAProxy revision');
    } finally {
      if (!this.stopped) this.cancel = this.o.clock.after(this.o.intervalMs, () => void this.poll());
    }
  }

  /** One read, bounded in time by the clock, so that a read that never answers cannot stop the watch. */
  private read(): Promise<string> {
    const limit = this.o.timeoutMs ?? Math.max(10_000, 2 * this.o.intervalMs);
    const timeout = new AbortController();
    const signal = AbortSignal.any([this.o.signal, timeout.signal]);
    return new Promise<string>((resolve, reject) => {
      const cancel = this.o.clock.after(limit, () => {
        const err = new Error(`no answer within ${limit} ms`);
        timeout.abort(err);
        reject(err);
      });
      this.o.revision(signal).then(
        (token) => {
          cancel();
          resolve(token);
        },
        (err) => {
          cancel();
          reject(err);
        },
      );
    });
  }
}
