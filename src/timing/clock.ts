/**
 * The time the Reconciler runs on (debounce, maximum delay, resync, backoff, recovery probe, `appliedAt`).
 * Injected so that tests control it; `systemClock` reads the global `Date` and timers at each call, so
 * vitest's fake timers control it too.
 */
export interface Clock {
  /** Epoch milliseconds. */
  now(): number;
  /**
   * Calls `fn` once after `ms` milliseconds; the returned function cancels the call. The timer never keeps the
   * process alive: the service's servers and HAProxy connections do.
   */
  after(ms: number, fn: () => void): () => void;
}

export const systemClock: Clock = {
  now: () => Date.now(),
  after(ms, fn) {
    const timer = setTimeout(fn, ms);
    timer.unref();
    return () => clearTimeout(timer);
  },
};

/** Resolves after `ms` milliseconds of `clock` time. */
export function sleep(clock: Clock, ms: number): Promise<void> {
  return new Promise((resolve) => {
    clock.after(ms, resolve);
  });
}
