import type { ClusterRecord } from '../model/cluster.js';
import type { PublishedStatus } from '../store/desired-store.js';

/** How long marks gather before their statuses are made: one publication per burst of passes. */
const PUBLISH_DELAY_MS = 200;

/**
 * The leader's statuses, handed to the shared store for the other replicas and `kubectl get`: passes mark
 * the clusters they judged (a full pass, all), and after a short delay each marked cluster's status is made
 * once and handed over (the store skips what it already shows, and coalesces its writes).
 */
export class StatusPublisher {
  private dirty: Set<string> | 'all' = new Set();
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;

  constructor(
    private readonly statusOf: (name: string) => PublishedStatus | undefined,
    private readonly list: () => ClusterRecord[],
    private readonly publish: (name: string, status: PublishedStatus) => void,
  ) {}

  mark(clusters: ReadonlySet<string> | 'all'): void {
    if (this.stopped) return;
    if (clusters === 'all') this.dirty = 'all';
    else if (this.dirty !== 'all') for (const name of clusters) this.dirty.add(name);
    this.timer ??= setTimeout(() => void this.flush(), PUBLISH_DELAY_MS);
  }

  /** Publishes what is marked now. */
  async flush(): Promise<void> {
    clearTimeout(this.timer);
    this.timer = undefined;
    const dirty = this.dirty;
    this.dirty = new Set();
    const names = dirty === 'all' ? this.list().map((r) => r.name) : [...dirty];
    for (const name of names) {
      const status = this.statusOf(name);
      if (status) this.publish(name, status);
    }
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.timer);
    this.timer = undefined;
  }
}
