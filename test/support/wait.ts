import { setImmediate, setTimeout as sleep } from 'node:timers/promises';

export interface WaitOptions<T> {
  /** Whether the probe's value is the one awaited; by default, any truthy value is. */
  ok?: (value: T) => boolean;
  /** The pause between probes; 0 yields to the event loop once (setImmediate) between probes. */
  everyMs?: number;
}

/**
 * The one way tests and benches wait for something: polls `probe` until its value is the one awaited and
 * returns that value. A probe that throws counts as "not yet". After `timeoutMs` it throws, naming `what`
 * was awaited and the last value (or error) seen.
 */
export async function waitFor<T>(
  probe: () => T | Promise<T>,
  timeoutMs: number,
  what: string,
  { ok = Boolean, everyMs = 100 }: WaitOptions<T> = {},
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const value = await probe();
      if (ok(value)) return value;
      last = value;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline)
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}; last: ${describe(last)}`);
    await (everyMs === 0 ? setImmediate() : sleep(everyMs));
  }
}

function describe(value: unknown): string {
  if (value instanceof Error) return `${value.name}: ${value.message}`;
  return String(JSON.stringify(value)).slice(0, 2000);
}
