import pino from 'pino';
import { describe, expect, it } from 'vitest';
import { RevisionWatch } from '../../src/reconcile/watch.js';
import { manualClock } from '../support/manual-clock.js';

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
