import { describe, expect, it } from 'vitest';
import { Backoff } from '../../src/timing/backoff.js';
import { Debounce } from '../../src/timing/debounce.js';
import { manualClock } from '../support/manual-clock.js';

/** A Debounce whose runs are recorded at the clock's time; `hold` keeps a run going until released. */
function bed(options: ConstructorParameters<typeof Debounce>[1]) {
  const { clock, advance } = manualClock(1_000_000);
  const runs: number[] = [];
  let hold: Promise<void> | undefined;
  const d = new Debounce(clock, options, async () => {
    runs.push(clock.now() - 1_000_000);
    await hold;
  });
  return {
    d,
    runs,
    advance,
    holdRuns(): () => void {
      let release = () => {};
      hold = new Promise((r) => {
        release = r;
      });
      return () => {
        hold = undefined;
        release();
      };
    },
  };
}

describe('Debounce', () => {
  it('runs once per burst, the debounce time after the last schedule', async () => {
    const b = bed({ debounceMs: 100, maxDelayMs: 1000 });
    for (let i = 0; i < 3; i++) {
      b.d.schedule();
      await b.advance(50);
    }
    expect(b.runs).toEqual([]);
    await b.advance(100);
    expect(b.runs).toEqual([200]);
    expect(b.d.pending).toBe(false);
  });

  it('holds a steady stream back no longer than the maximum delay after its wait began', async () => {
    const b = bed({ debounceMs: 100, maxDelayMs: 1000 });
    for (let i = 0; i < 45; i++) {
      b.d.schedule();
      await b.advance(50);
    }
    // Schedules at 0, 50, ..., 2200, never 100 ms apart: runs at the bound, each wait from the run's end.
    expect(b.runs).toEqual([1000, 2000]);
    await b.advance(100);
    expect(b.runs).toEqual([1000, 2000, 2300]);
  });

  it('runs at once after a quiet spell with `leading`, and batches what follows closely', async () => {
    const b = bed({ debounceMs: 100, maxDelayMs: 1000, leading: true });
    b.d.schedule();
    await b.advance(0);
    expect(b.runs).toEqual([0]);
    await b.advance(50);
    b.d.schedule();
    await b.advance(50);
    b.d.schedule();
    expect(b.runs).toEqual([0]);
    await b.advance(100);
    expect(b.runs).toEqual([0, 200]);
    // Quiet for longer than the debounce time: the next one goes at once again.
    await b.advance(500);
    b.d.schedule();
    await b.advance(0);
    expect(b.runs).toEqual([0, 200, 700]);
  });

  it('never overlaps runs: what is scheduled during a run waits for its end, then the debounce', async () => {
    const b = bed({ debounceMs: 100, maxDelayMs: 1000, leading: true });
    const release = b.holdRuns();
    b.d.schedule();
    await b.advance(0);
    await b.advance(10);
    b.d.schedule();
    await b.advance(500);
    expect(b.runs).toEqual([0]);
    release();
    await b.advance(0);
    expect(b.runs).toEqual([0]);
    await b.advance(100);
    expect(b.runs).toEqual([0, 610]);
  });

  it('leaves the spacing asked for after a run before the next one', async () => {
    const b = bed({ debounceMs: 100, maxDelayMs: 1000, spacingMs: () => 400 });
    b.d.schedule();
    await b.advance(100);
    expect(b.runs).toEqual([100]);
    b.d.schedule();
    await b.advance(100);
    expect(b.runs).toEqual([100]);
    await b.advance(300);
    expect(b.runs).toEqual([100, 500]);
  });

  it('runs what is scheduled at once on flush, and nothing after close', async () => {
    const b = bed({ debounceMs: 100, maxDelayMs: 1000 });
    b.d.schedule();
    await b.d.flush();
    expect(b.runs).toEqual([0]);
    expect(b.d.pending).toBe(false);
    b.d.schedule();
    await b.d.close();
    b.d.schedule();
    await b.advance(5000);
    expect(b.runs).toEqual([0]);
  });
});

describe('Backoff', () => {
  it('doubles from the minimum up to the maximum, and starts again after a reset', () => {
    const b = new Backoff(500, 30_000);
    const waits = Array.from({ length: 8 }, () => b.next());
    expect(waits).toEqual([500, 1000, 2000, 4000, 8000, 16_000, 30_000, 30_000]);
    expect(b.peek()).toBe(30_000);
    b.reset();
    expect(b.next()).toBe(500);
  });
});
