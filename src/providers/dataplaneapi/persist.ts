import type { Logger } from 'pino';
import type { HaproxyState } from '../../haproxy/model.js';
import { errorText } from '../../model/errors.js';
import type { Clock } from '../../timing/clock.js';
import { Debounce } from '../../timing/debounce.js';

/** What the runtime changed and the files do not hold yet: by backend (its servers), and by SNI map. */
export interface Pending {
  backends: Set<string>;
  maps: Set<string>;
}

export interface PersistOptions {
  clock: Clock;
  debounceMs: number;
  maxDelayMs: number;
  logger: Logger;
  /** Writes `target`'s servers of `pending.backends` and entries of `pending.maps` to the files, no reload. */
  write(target: HaproxyState, pending: Pending): Promise<void>;
}

/**
 * Persistence off the critical path: servers and map entries changed at runtime (`runtime.ts`) reach the
 * files HAProxy loads soon after, batched on the `Debounce` (at most `maxDelayMs` after the first change
 * waiting, `debounceMs` after the last), without a reload, so that a reload or restart by anyone comes back
 * with them. A write waits at least as long after the last one as the last one took: the API parses the
 * whole configuration for each (seconds at thousands of slots), and runtime requests must not queue behind
 * it. A failed write keeps what it carried pending and is tried again.
 */
export class Persistence {
  private target: HaproxyState | undefined;
  private pending: Pending = { backends: new Set(), maps: new Set() };
  private readonly batch: Debounce;
  private lastMs = 0;
  /** The last write's duration and backends written, for logs and the report. */
  last: { ms: number; backends: number } | undefined;

  constructor(private readonly o: PersistOptions) {
    this.batch = new Debounce(
      o.clock,
      { debounceMs: o.debounceMs, maxDelayMs: o.maxDelayMs, spacingMs: () => this.lastMs },
      () => this.run(),
    );
  }

  /** HAProxy runs `target`; the servers of `backends` and the entries of `maps` are to reach the files. */
  schedule(target: HaproxyState, backends: Iterable<string>, maps: Iterable<string>): void {
    this.target = target;
    for (const b of backends) this.pending.backends.add(b);
    for (const m of maps) this.pending.maps.add(m);
    if (this.isPending) this.batch.schedule();
  }

  /** HAProxy runs `target` (a read, a write of the files): what is pending is written from it. */
  follow(target: HaproxyState): void {
    this.target = target;
  }

  get isPending(): boolean {
    return this.pending.backends.size > 0 || this.pending.maps.size > 0;
  }

  /**
   * What is pending, handed to a write of the files that carries it along (the file path of an apply); it is
   * pending again if that write fails (`giveBack`).
   */
  take(): Pending {
    const taken = this.pending;
    this.pending = { backends: new Set(), maps: new Set() };
    return taken;
  }

  giveBack(p: Pending): void {
    for (const b of p.backends) this.pending.backends.add(b);
    for (const m of p.maps) this.pending.maps.add(m);
    if (this.isPending) this.batch.schedule();
  }

  /** Writes what is pending now, and waits for a write under way. */
  async flush(): Promise<void> {
    if (this.isPending) this.batch.schedule();
    await this.batch.flush();
  }

  async close(): Promise<void> {
    await this.batch.close();
  }

  private async run(): Promise<void> {
    const target = this.target;
    if (!target || !this.isPending) return;
    const batch = this.take();
    const started = this.o.clock.now();
    try {
      await this.o.write(target, batch);
      this.lastMs = this.o.clock.now() - started;
      this.last = { ms: this.lastMs, backends: batch.backends.size };
      this.o.logger.debug({ ...this.last, maps: batch.maps.size }, 'runtime changes written to the files');
    } catch (err) {
      this.o.logger.warn({ err: errorText(err) }, 'runtime changes not yet written to the files; retried');
      this.giveBack(batch);
    }
  }
}
