import type { SniProbeResult } from './tls.js';

/**
 * A client connecting in a tight loop, one probe after the other, until stopped: what proves that a change
 * never refused a client it should let in (or let in one it should refuse) at any moment. Bounded whatever
 * happens to the test: at most `maxProbes` probes and `maxMs` milliseconds.
 */
export interface FireLoop {
  /** Resolves once `n` more probes have completed (rejects when the loop ends first). */
  probesFromNow(n: number): Promise<void>;
  totals(): { reached: number; refused: number; why: Record<string, number> };
  stop(): Promise<void>;
}

export function fireLoop(
  probe: () => Promise<SniProbeResult>,
  { maxProbes = 100_000, maxMs = 240_000 } = {},
): FireLoop {
  const started = Date.now();
  let reached = 0;
  let refused = 0;
  const why: Record<string, number> = {};
  let stopping = false;
  let ended = false;
  const waiters: Array<{ at: number; resolve: () => void; reject: (e: Error) => void }> = [];
  const done = () => reached + refused;
  const loop = (async () => {
    while (!stopping && done() < maxProbes && Date.now() - started < maxMs) {
      const r = await probe();
      if ('reached' in r) reached++;
      else {
        refused++;
        why[r.failed] = (why[r.failed] ?? 0) + 1;
      }
      for (const w of waiters.filter((x) => x.at <= done())) {
        waiters.splice(waiters.indexOf(w), 1);
        w.resolve();
      }
    }
    ended = true;
    for (const w of waiters.splice(0)) w.reject(new Error(`the loop ended after ${done()} probes`));
  })();
  return {
    probesFromNow: (n) =>
      new Promise((resolve, reject) => {
        if (ended) reject(new Error(`the loop ended after ${done()} probes`));
        else waiters.push({ at: done() + n, resolve, reject });
      }),
    totals: () => ({ reached, refused, why: { ...why } }),
    async stop() {
      stopping = true;
      await loop;
    },
  };
}

/**
 * Two loops (a source a list lets in, one it shuts out) around `during`: each completes 5 probes before it and
 * 5 after, then both stop, whatever `during` did. Returns both totals.
 */
export async function aroundLoops(inside: FireLoop, outside: FireLoop, during: () => Promise<void>) {
  try {
    await Promise.all([inside.probesFromNow(5), outside.probesFromNow(5)]);
    await during();
    await Promise.all([inside.probesFromNow(5), outside.probesFromNow(5)]);
  } finally {
    await Promise.all([inside.stop(), outside.stop()]);
  }
  return { i: inside.totals(), o: outside.totals() };
}
