import { setImmediate } from 'node:timers/promises';
import type { Clock } from '../../src/timing/clock.js';

/** A clock that moves only when the test says so: timers run in order as `advance` passes their time. */
export function manualClock(start = 0) {
  let now = start;
  let timers: Array<{ at: number; fn: () => void }> = [];
  const clock: Clock = {
    now: () => now,
    after(ms, fn) {
      const t = { at: now + ms, fn };
      timers.push(t);
      return () => {
        timers = timers.filter((x) => x !== t);
      };
    },
  };
  /** Moves time forward by `ms`, running each timer due, and what it started, in order. */
  const advance = async (ms: number) => {
    const end = now + ms;
    for (;;) {
      await setImmediate();
      const next = timers.filter((t) => t.at <= end).sort((a, b) => a.at - b.at)[0];
      if (!next) break;
      timers = timers.filter((t) => t !== next);
      now = next.at;
      next.fn();
    }
    now = end;
    await setImmediate();
  };
  return { clock, advance, pending: () => timers.length };
}
