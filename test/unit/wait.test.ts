import { describe, expect, it } from 'vitest';
import { waitFor } from '../support/wait.js';

describe('waitFor, the one wait helper of tests and benches', () => {
  it('returns the first value the probe gives that is awaited', async () => {
    let n = 0;
    expect(await waitFor(() => ++n, 1_000, 'three', { ok: (v) => v === 3, everyMs: 1 })).toBe(3);
    // An async probe, awaited between turns of the event loop: the default is any truthy value.
    const probe = async () => (n++ > 4 ? 'done' : '');
    expect(await waitFor(probe, 1_000, 'done', { everyMs: 0 })).toBe('done');
  });

  it('counts a probe that throws as not yet', async () => {
    let n = 0;
    const probe = () => {
      if (++n < 3) throw new Error('not up');
      return n;
    };
    expect(await waitFor(probe, 1_000, 'the probe to stop throwing', { everyMs: 1 })).toBe(3);
  });

  it('throws after the timeout, naming what was awaited and the last value or error seen', async () => {
    await expect(
      waitFor(() => ({ state: 'pending' }), 50, 'applied', { ok: (v) => v.state === 'applied' }),
    ).rejects.toThrow('timed out after 50 ms waiting for applied; last: {"state":"pending"}');
    await expect(
      waitFor(
        () => {
          throw new Error('ECONNREFUSED');
        },
        50,
        'an answer',
        { everyMs: 5 },
      ),
    ).rejects.toThrow('waiting for an answer; last: Error: ECONNREFUSED');
  });
});
