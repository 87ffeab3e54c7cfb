import type { Clock } from './clock.js';

export interface DebounceOptions {
  /** A run waits until nothing was scheduled for this long... */
  debounceMs: number;
  /** ...but never longer than this after its wait began. */
  maxDelayMs: number;
  /**
   * Run at once when scheduled after a quiet spell (nothing pending, the last run ended at least
   * `debounceMs` ago): the loop applies the first change of a burst without waiting; persistence does not.
   */
  leading?: boolean;
  /** Extra time to leave after a run before the next one, asked when a wait begins (default none). */
  spacingMs?: () => number;
}

/**
 * Debounce with a maximum delay, on an injected `Clock`: the one mechanism behind the reconcile loop's
 * batching of events and both providers' batching of file writes after runtime changes. Runs never
 * overlap; what is scheduled during a run waits for it, and its wait begins when the run ends. A burst of
 * schedules less than `debounceMs` apart costs one run per `maxDelayMs` at most (two with `leading`).
 */
export class Debounce {
  private cancelTimer: (() => void) | undefined;
  /** When the current wait began, and when something was last scheduled. */
  private waitStart = 0;
  private lastAt = 0;
  private lastEnd = Number.NEGATIVE_INFINITY;
  private dirty = false;
  private running: Promise<void> | undefined;
  private closed = false;

  constructor(
    private readonly clock: Clock,
    private readonly o: DebounceOptions,
    private readonly run: () => Promise<void>,
  ) {}

  /** Whether a run is scheduled or under way. */
  get pending(): boolean {
    return this.dirty || this.running !== undefined;
  }

  /** Asks for a run: at once after a quiet spell (`leading`), else after the debounce. */
  schedule(): void {
    if (this.closed) return;
    const now = this.clock.now();
    this.lastAt = now;
    if (this.dirty && (this.cancelTimer || this.running)) {
      if (this.cancelTimer) this.arm();
      return;
    }
    this.dirty = true;
    if (this.running) return;
    if (this.o.leading && now - this.lastEnd >= this.o.debounceMs) {
      this.fire();
      return;
    }
    this.waitStart = now;
    this.arm();
  }

  /**
   * Waits for a run under way, then runs at once what is scheduled (if anything) and waits for it: once, so
   * that a run that keeps failing and asking again cannot hold the caller.
   */
  async flush(): Promise<void> {
    await this.running?.catch(() => {});
    if (this.dirty && !this.running) this.fire();
    await this.running?.catch(() => {});
  }

  /** Drops what is scheduled and waits for a run under way; later schedules are ignored. */
  async close(): Promise<void> {
    this.closed = true;
    this.dirty = false;
    this.cancelTimer?.();
    this.cancelTimer = undefined;
    await this.running?.catch(() => {});
  }

  private arm(): void {
    this.cancelTimer?.();
    const spacing = this.o.spacingMs?.() ?? 0;
    const at = Math.max(
      Math.min(this.lastAt + this.o.debounceMs, this.waitStart + this.o.maxDelayMs),
      this.lastEnd + spacing,
    );
    this.cancelTimer = this.clock.after(Math.max(0, at - this.clock.now()), () => {
      this.cancelTimer = undefined;
      this.fire();
    });
  }

  private fire(): void {
    this.cancelTimer?.();
    this.cancelTimer = undefined;
    this.dirty = false;
    const run = (async () => this.run())();
    this.running = run.then(
      () => this.ended(),
      () => this.ended(),
    );
  }

  private ended(): void {
    this.running = undefined;
    this.lastEnd = this.clock.now();
    if (!this.dirty || this.closed) return;
    // What came during the run waits from its end.
    this.waitStart = this.lastEnd;
    this.lastAt = Math.max(this.lastAt, this.lastEnd);
    this.arm();
  }
}
