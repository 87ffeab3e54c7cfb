import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { sign, WebhookAuthenticator } from '../../src/webhook/auth.js';

const SECRET = 'replay-edge-secret-0123';
const WINDOW = 300;
const T = 1_700_000_000;
const PATH = '/v1/clusters';
const body = Buffer.from(JSON.stringify({ clusters: [] }));

/** A captured full-set PUT signed at T, as the attacker replays it. */
function captured() {
  const ts = String(T);
  const signature = sign(SECRET, ts, 'PUT', PATH, body);
  const headers: Record<string, string> = { 'x-kubebyon-timestamp': ts, 'x-kubebyon-signature': signature };
  return { method: 'PUT', url: PATH, body, header: (n: string) => headers[n.toLowerCase()] };
}

/** A clock the test sets (in seconds); readings queued in `next` are answered first, one each. */
function testClock() {
  const c = { t: T + 1, next: [] as number[], now: () => (c.next.shift() ?? c.t) * 1000 };
  return c;
}

// The black-box attack: a 1 MB PUT signed near the window's end, replayed with its last byte held until just
// before ts + 300 s, so that its HMAC ran across the edge; 4 of 7 copies were accepted.
describe('a write replayed at the edge of the replay window', () => {
  let dir: string;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'kubebyon-replay-edge-'));
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it.each([
    ['the edge is crossed between the window test and the claim', T + WINDOW + 0.015],
    ['the clock jumps far past the window meanwhile', T + WINDOW + 3600],
  ])('is refused as replayed when %s', async (_what, later) => {
    const c = testClock();
    const auth = await WebhookAuthenticator.open(
      {
        mode: 'hmac',
        secret: SECRET,
        replayWindowSeconds: WINDOW,
        replayFile: join(dir, 'state.json.replay'),
      },
      c.now,
    );
    // The original write, accepted once.
    expect(await auth.check(captured())).toEqual({ ok: true });
    // The copy: the window is judged 15 ms before its edge, and any later reading is past it.
    c.next.push(T + WINDOW - 0.015);
    c.t = later;
    expect(await auth.check(captured())).toEqual({ ok: false, reason: 'replayed' });
  });
});
