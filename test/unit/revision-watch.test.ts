import { setImmediate } from 'node:timers/promises';
import pino from 'pino';
import { describe, expect, it } from 'vitest';
import type { Clock } from '../../src/reconcile/clock.js';
import { RevisionWatch } from '../../src/reconcile/watch.js';

/** A clock that moves only when the test says so. */
function manualClock() {
  let now = 0;
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

describe('RevisionWatch', () => {
  const silent = pino({ level: 'silent' });

  it('reads at once and every interval; calls back only when the token moves, not for the first read', async () => {
    const { clock, advance } = manualClock();
    let token = 'a';
    let reads = 0;
    let changes = 0;
    const watch = new RevisionWatch({
      clock,
      intervalMs: 500,
      revision: async () => {
        reads++;
        return token;
      },
      signal: new AbortController().signal,
      changed: () => changes++,
      logger: silent,
    });
    watch.start();
    await advance(0);
    expect(reads).toBe(1);
    await advance(1_000);
    expect({ reads, changes }).toEqual({ reads: 3, changes: 0 });
    token = 'b';
    await advance(500);
    expect(changes).toBe(1);
    await advance(2_000);
    expect(changes).toBe(1);
    watch.stop();
    await advance(5_000);
    expect(reads).toBe(8);
  });

  it('gives up on a read that does not answer in time, and keeps watching', async () => {
    const { clock, advance } = manualClock();
    let hang = true;
    let reads = 0;
    let aborted = 0;
    let changes = 0;
    const watch = new RevisionWatch({
      clock,
      intervalMs: 500,
      timeoutMs: 2_000,
      revision: (signal) => {
        reads++;
        if (!hang) return Promise.resolve(reads < 3 ? 'x' : 'y');
        signal.addEventListener('abort', () => aborted++);
        return new Promise<string>(() => {});
      },
      signal: new AbortController().signal,
      changed: () => changes++,
      logger: silent,
    });
    watch.start();
    await advance(0);
    expect(reads).toBe(1);
    await advance(1_999);
    expect(reads).toBe(1);
    hang = false;
    await advance(1);
    expect(aborted).toBe(1);
    await advance(500);
    expect(reads).toBe(2);
    await advance(500);
    expect({ reads, changes }).toEqual({ reads: 3, changes: 1 });
    watch.stop();
  });

  it('does nothing with an interval of 0', async () => {
    const { clock, advance, pending } = manualClock();
    const watch = new RevisionWatch({
      clock,
      intervalMs: 0,
      revision: async () => 'a',
      signal: new AbortController().signal,
      changed: () => {},
      logger: silent,
    });
    watch.start();
    expect(pending()).toBe(0);
    await advance(10_000);
  });
});
