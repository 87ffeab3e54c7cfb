import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, describe, expect, it } from 'vitest';
import { sign } from '../../src/webhook/auth.js';
import { UploadBudget } from '../../src/webhook/upload-budget.js';
import { type RawExchange, rawRequest, within } from '../support/raw-http.js';
import { startWebhookApp, TEST_SECRET, type WebhookApp } from '../support/webhook-app.js';

const LONG = 20_000;
const now = () => String(Math.floor(Date.now() / 1000));
const cluster = Buffer.from(
  JSON.stringify({
    control_plane_host: 'api.example.com',
    public_access_mode: 'loadbalancer',
    node_port: 30443,
  }),
);

/** A connection with well-formed fake credentials that declares `length` bytes and sends `sent` of them. */
function holder(port: number, length: number, sent: number): RawExchange {
  return rawRequest(
    port,
    [
      'PUT /v1/clusters/held HTTP/1.1',
      'host: 127.0.0.1',
      `x-kubebyon-timestamp: ${now()}`,
      `x-kubebyon-signature: sha256=${'0'.repeat(64)}`,
      `content-length: ${length}`,
    ],
    'x'.repeat(sent),
    LONG,
  );
}

async function signedPut(base: string, name: string): Promise<{ status: number; body: unknown }> {
  const ts = now();
  const path = `/v1/clusters/${name}`;
  const res = await fetch(`${base}${path}`, {
    method: 'PUT',
    body: cluster,
    headers: {
      'content-type': 'application/json',
      'x-kubebyon-timestamp': ts,
      'x-kubebyon-signature': sign(TEST_SECRET, ts, 'PUT', path, cluster),
    },
  });
  return { status: res.status, body: await res.json() };
}

describe('unverified request bodies', () => {
  let app: WebhookApp;
  const holders: RawExchange[] = [];
  afterEach(async () => {
    for (const h of holders.splice(0)) h.socket.destroy();
    await app?.stop();
  });

  it(
    'held open by connections that send one byte each do not keep a signed write out',
    async () => {
      // The black-box attack: 16 such connections got every signed write 503 busy for 10 s, repeatably.
      app = await startWebhookApp({ bodyTimeoutMs: 60_000 });
      for (let i = 0; i < 32; i++) holders.push(holder(app.port, 1000, 1));
      await sleep(300);
      expect(await signedPut(app.base, 'demo')).toEqual({ status: 202, body: expect.anything() });
      expect(app.store.get('demo')?.host).toBe('api.example.com');
    },
    LONG,
  );

  it(
    'are bounded by the bytes they hold: the oldest gets 503 busy with Retry-After, so a newer one goes on',
    async () => {
      app = await startWebhookApp({ pendingBodyBytes: 3000, bodyTimeoutMs: 60_000 });
      for (let i = 0; i < 3; i++) {
        holders.push(holder(app.port, 2000, 1000));
        await sleep(100);
      }
      expect(await signedPut(app.base, 'demo')).toMatchObject({ status: 202 });
      const [oldest, ...others] = holders as [RawExchange, ...RawExchange[]];
      const refused = await oldest.response;
      expect(refused.status).toBe(503);
      expect(refused.headers['retry-after']).toMatch(/^\d+$/);
      expect(JSON.parse(refused.body)).toMatchObject({ error: 'busy' });
      await within(oldest.closed, 5000, 'the server closes the refused connection');
      // The newer holders were not needed to make room: they are still being read.
      for (const h of others) expect(h.socket.destroyed).toBe(false);
      expect(app.store.get('demo')?.host).toBe('api.example.com');
    },
    LONG,
  );
});

describe('UploadBudget', () => {
  it('makes room for a newer upload by cutting off older ones, oldest first, never newer ones', () => {
    const budget = new UploadBudget(100);
    const [a, b, c] = [budget.enter(), budget.enter(), budget.enter()];
    expect(a.charge(40)).toBe(true);
    expect(b.charge(40)).toBe(true);
    expect(c.charge(50)).toBe(true);
    expect([a.signal.aborted, b.signal.aborted, c.signal.aborted]).toEqual([true, false, false]);
    expect(budget.bytes).toBe(90);
    // The oldest left cannot push out a newer one: it is refused itself.
    expect(b.charge(20)).toBe(false);
    expect(c.signal.aborted).toBe(false);
    b.leave();
    expect(budget.bytes).toBe(50);
    // A cut-off upload holds nothing and counts nothing more.
    expect(a.charge(1)).toBe(false);
    expect(budget.bytes).toBe(50);
  });

  it('counts only bytes received: any number of uploads that sent nothing fit', () => {
    const budget = new UploadBudget(10);
    const idle = Array.from({ length: 1000 }, () => budget.enter());
    const writer = budget.enter();
    expect(writer.charge(10)).toBe(true);
    expect(idle.some((u) => u.signal.aborted)).toBe(false);
  });
});
