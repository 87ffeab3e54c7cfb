import type { Logger } from 'pino';
import { describeError } from '../kube/errors.js';
import type { PublishedStatus } from './desired-store.js';

/**
 * Status writes, off the caller's path: per cluster only the latest status waits (a newer one replaces it),
 * at most `concurrency` writes at a time, none when the stored status already says the same. A failed write
 * is logged; the next publish for that cluster tries again.
 */
export class StatusPublisher {
  private readonly pending = new Map<string, PublishedStatus>();
  private readonly inFlight = new Set<string>();
  private idle: Array<() => void> = [];
  /** Status writes sent to the API server (tests check the coalescing with it). */
  writes = 0;

  constructor(
    /** Whether the stored status already says this. */
    private readonly current: (name: string, status: PublishedStatus) => boolean,
    private readonly write: (name: string, status: PublishedStatus) => Promise<void>,
    private readonly logger: Logger,
    private readonly concurrency = 8,
  ) {}

  publish(name: string, status: PublishedStatus): void {
    this.pending.set(name, status);
    this.pump();
  }

  /** Resolves once no status waits or is being written. */
  flush(): Promise<void> {
    if (this.pending.size === 0 && this.inFlight.size === 0) return Promise.resolve();
    return new Promise((resolve) => this.idle.push(resolve));
  }

  private pump(): void {
    for (const [name, status] of this.pending) {
      if (this.inFlight.size >= this.concurrency) return;
      // One write per cluster at a time: a newer status waits for it, so they land in order.
      if (this.inFlight.has(name)) continue;
      this.pending.delete(name);
      if (this.current(name, status)) continue;
      this.inFlight.add(name);
      this.writes++;
      void this.write(name, status)
        .catch((err: unknown) =>
          this.logger.warn(
            { cluster: name, err: describeError(err) },
            'writing the ClusterRoute status failed; the next publish tries again',
          ),
        )
        .finally(() => {
          this.inFlight.delete(name);
          this.pump();
        });
    }
    if (this.pending.size === 0 && this.inFlight.size === 0) {
      const waiting = this.idle;
      this.idle = [];
      for (const resolve of waiting) resolve();
    }
  }
}
