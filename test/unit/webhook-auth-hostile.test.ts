import * as crypto from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { sign } from '../../src/webhook/auth.js';
import { startWebhookApp, TEST_SECRET, type WebhookApp } from '../support/webhook-app.js';

// Every comparison of a credential must go through timingSafeEqual; the spy proves that it does.
vi.mock('node:crypto', async (importOriginal) => {
  const actual = await importOriginal<typeof import('node:crypto')>();
  return { ...actual, default: actual, timingSafeEqual: vi.fn(actual.timingSafeEqual) };
});

const now = () => Math.floor(Date.now() / 1000);
const body = Buffer.from(
  JSON.stringify({
    control_plane_host: 'api.example.com',
    public_access_mode: 'loadbalancer',
    node_port: 30443,
  }),
);
const PATH = '/v1/clusters/demo';

interface Attempt {
  what: string;
  method?: string;
  path?: string;
  headers: Record<string, string>;
  body?: Buffer;
  reason: 'missing_credentials' | 'bad_credentials' | 'stale_timestamp' | 'replayed';
  /** Whether the refusal needed the HMAC (or token) compared, rather than only the headers' form. */
  compared?: boolean;
}

const signed = (o: {
  ts?: number | string;
  method?: string;
  path?: string;
  body?: Buffer;
  secret?: string;
}) => {
  const ts = String(o.ts ?? now());
  return {
    'x-kubebyon-timestamp': ts,
    'x-kubebyon-signature': sign(
      o.secret ?? TEST_SECRET,
      ts,
      o.method ?? 'PUT',
      o.path ?? PATH,
      o.body ?? body,
    ),
  };
};

/** Attempts on `PUT /v1/clusters/demo` in HMAC mode that must all get 401 with the given reason. */
function hmacAttempts(): Attempt[] {
  const good = signed({});
  const sig = good['x-kubebyon-signature'];
  const hex = sig.slice('sha256='.length);
  const ts = good['x-kubebyon-timestamp'];
  const withSig = (s: string) => ({ 'x-kubebyon-timestamp': ts, 'x-kubebyon-signature': s });
  return [
    { what: 'no credentials', headers: {}, reason: 'missing_credentials' },
    {
      what: 'a signature without a timestamp',
      headers: { 'x-kubebyon-signature': sig },
      reason: 'missing_credentials',
    },
    {
      what: 'a timestamp without a signature',
      headers: { 'x-kubebyon-timestamp': ts },
      reason: 'missing_credentials',
    },
    { what: 'an empty signature', headers: withSig(''), reason: 'missing_credentials' },
    { what: 'a bare hex signature', headers: withSig(hex), reason: 'bad_credentials' },
    { what: 'a truncated signature', headers: withSig(sig.slice(0, -1)), reason: 'bad_credentials' },
    { what: 'a signature one digit too long', headers: withSig(`${sig}0`), reason: 'bad_credentials' },
    { what: 'upper-case hex', headers: withSig(`sha256=${hex.toUpperCase()}`), reason: 'bad_credentials' },
    { what: 'an upper-case scheme', headers: withSig(`SHA256=${hex}`), reason: 'bad_credentials' },
    { what: 'another scheme', headers: withSig(`sha1=${hex}`), reason: 'bad_credentials' },
    {
      what: 'spaces around the signature',
      headers: withSig(`sha256= ${hex.slice(1)}`),
      reason: 'bad_credentials',
    },
    { what: 'a non-hex signature', headers: withSig(`sha256=${'z'.repeat(64)}`), reason: 'bad_credentials' },
    {
      what: 'two signatures',
      headers: { 'x-kubebyon-timestamp': ts, 'x-kubebyon-signature': `${sig}, ${sig}` },
      reason: 'bad_credentials',
    },
    {
      what: 'one flipped digit',
      headers: withSig(`sha256=${hex.slice(0, -1)}${hex.endsWith('0') ? '1' : '0'}`),
      reason: 'bad_credentials',
      compared: true,
    },
    {
      what: 'another key',
      headers: signed({ secret: 'another-secret-0123456789' }),
      reason: 'bad_credentials',
      compared: true,
    },
    {
      what: 'a signature for DELETE',
      headers: signed({ method: 'DELETE' }),
      reason: 'bad_credentials',
      compared: true,
    },
    {
      what: 'a signature for another path',
      headers: signed({ path: '/v1/clusters/other' }),
      reason: 'bad_credentials',
      compared: true,
    },
    {
      what: 'a signature without the query sent',
      path: `${PATH}?wait=true`,
      headers: signed({}),
      reason: 'bad_credentials',
      compared: true,
    },
    {
      what: 'a signature for another body',
      headers: signed({ body: Buffer.from(body.toString().replace('api.', 'www.')) }),
      reason: 'bad_credentials',
      compared: true,
    },
    {
      what: 'a signature for an empty body',
      headers: signed({ body: Buffer.alloc(0) }),
      reason: 'bad_credentials',
      compared: true,
    },
    { what: 'a timestamp 301 s old', headers: signed({ ts: now() - 301 }), reason: 'stale_timestamp' },
    { what: 'a timestamp 330 s ahead', headers: signed({ ts: now() + 330 }), reason: 'stale_timestamp' },
    { what: 'timestamp 0', headers: signed({ ts: 0 }), reason: 'stale_timestamp' },
    { what: 'a negative timestamp', headers: signed({ ts: `-${now()}` }), reason: 'stale_timestamp' },
    { what: 'a timestamp in milliseconds', headers: signed({ ts: Date.now() }), reason: 'stale_timestamp' },
    { what: 'an exponent timestamp', headers: signed({ ts: '1.7e9' }), reason: 'stale_timestamp' },
    { what: 'a padded timestamp', headers: signed({ ts: ` ${now()}x` }), reason: 'stale_timestamp' },
    {
      what: 'a hex timestamp',
      headers: signed({ ts: `0x${now().toString(16)}` }),
      reason: 'stale_timestamp',
    },
    { what: 'a 13-digit timestamp', headers: signed({ ts: '9'.repeat(13) }), reason: 'stale_timestamp' },
    {
      what: 'a bearer token in HMAC mode',
      headers: { authorization: `Bearer ${TEST_SECRET}` },
      reason: 'missing_credentials',
    },
  ];
}

function bearerAttempts(): Attempt[] {
  return [
    { what: 'no credentials', headers: {}, reason: 'missing_credentials' },
    { what: 'HMAC headers in bearer mode', headers: signed({}), reason: 'missing_credentials' },
    {
      what: 'a lower-case scheme',
      headers: { authorization: `bearer ${TEST_SECRET}` },
      reason: 'missing_credentials',
    },
    {
      what: 'Basic credentials',
      headers: { authorization: `Basic ${btoa(`admin:${TEST_SECRET}`)}` },
      reason: 'missing_credentials',
    },
    { what: 'a bare token', headers: { authorization: TEST_SECRET }, reason: 'missing_credentials' },
    {
      what: 'a truncated token',
      headers: { authorization: `Bearer ${TEST_SECRET.slice(0, -1)}` },
      reason: 'bad_credentials',
      compared: true,
    },
    {
      what: 'a longer token',
      headers: { authorization: `Bearer ${TEST_SECRET}x` },
      reason: 'bad_credentials',
      compared: true,
    },
    {
      what: 'a token in upper case',
      headers: { authorization: `Bearer ${TEST_SECRET.toUpperCase()}` },
      reason: 'bad_credentials',
      compared: true,
    },
    {
      what: 'two spaces before the token',
      headers: { authorization: `Bearer  ${TEST_SECRET}` },
      reason: 'bad_credentials',
      compared: true,
    },
    {
      what: 'another key',
      headers: { authorization: 'Bearer another-secret-0123456789' },
      reason: 'bad_credentials',
      compared: true,
    },
    { what: 'an empty token', headers: { authorization: 'Bearer ' }, reason: 'missing_credentials' },
  ];
}

async function send(app: WebhookApp, a: Attempt) {
  const method = a.method ?? 'PUT';
  const res = await fetch(`${app.base}${a.path ?? PATH}`, {
    method,
    headers: { 'content-type': 'application/json', ...a.headers },
    body: a.body ?? body,
  });
  return { status: res.status, body: await res.json() };
}

async function failures(app: WebhookApp): Promise<Record<string, number>> {
  const { values } = await app.metrics.webhookAuthFailures.get();
  return Object.fromEntries(values.map((v) => [String(v.labels.reason), v.value]));
}

describe('webhook authentication under hostile credentials', () => {
  let app: WebhookApp | undefined;
  let dir: string;
  const spy = vi.mocked(crypto.timingSafeEqual);
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'kubebyon-auth-'));
  });
  afterEach(async () => {
    await app?.stop();
    app = undefined;
    rmSync(dir, { recursive: true, force: true });
  });

  for (const [mode, attempts] of [
    ['hmac', hmacAttempts],
    ['bearer', bearerAttempts],
  ] as const) {
    it(`${mode} mode: every forged, malformed or stale credential gets 401, is counted by reason, compared in constant time, and stores nothing`, async () => {
      app = await startWebhookApp({ authMode: mode, replayFile: true, dir });
      const list = attempts();
      const expected: Record<string, number> = {
        missing_credentials: 0,
        bad_credentials: 0,
        stale_timestamp: 0,
        replayed: 0,
      };
      for (const a of list) {
        spy.mockClear();
        const res = await send(app, a);
        expect({ what: a.what, ...res }).toEqual({
          what: a.what,
          status: 401,
          body: { error: 'unauthorized', reason: a.reason },
        });
        if (a.compared) {
          // Hashes of both sides, so equal lengths: the time taken says nothing about the secret.
          expect(spy, a.what).toHaveBeenCalled();
          for (const [x, y] of spy.mock.calls) expect([x.byteLength, y.byteLength]).toEqual([32, 32]);
        }
        expected[a.reason] = (expected[a.reason] ?? 0) + 1;
      }
      expect(await failures(app)).toEqual(expected);
      expect(app.store.list()).toEqual([]);
      expect(existsSync(join(dir, 'state.json'))).toBe(false);
      expect(app.provider.applies).toEqual([]);
      // The real credential still works: nothing above locked the caller out.
      const ok = await send(app, {
        what: 'the real credential',
        headers: mode === 'hmac' ? signed({}) : { authorization: `Bearer ${TEST_SECRET}` },
        reason: 'replayed',
      });
      expect(ok.status).toBe(202);
      expect(app.store.get('demo')?.host).toBe('api.example.com');
    });
  }

  it('refuses a replayed write with 401 replayed, also after a restart, and counts it', async () => {
    app = await startWebhookApp({ replayFile: true, dir });
    const headers = signed({});
    const first = await send(app, { what: 'first', headers, reason: 'replayed' });
    expect(first.status).toBe(202);
    expect(await send(app, { what: 'replay', headers, reason: 'replayed' })).toEqual({
      status: 401,
      body: { error: 'unauthorized', reason: 'replayed' },
    });
    // The store changes between the two, so that a replay taking effect would show.
    await app.store.delete('demo');
    await app.stop();
    app = await startWebhookApp({ replayFile: true, dir });
    expect(await send(app, { what: 'replay after restart', headers, reason: 'replayed' })).toEqual({
      status: 401,
      body: { error: 'unauthorized', reason: 'replayed' },
    });
    expect(app.store.list()).toEqual([]);
    expect((await failures(app)).replayed).toBe(1);
    expect(readFileSync(join(dir, 'state.json.replay'), 'utf8')).toContain(headers['x-kubebyon-signature']);
  });

  it('answers 503 state_unavailable, and acts on nothing, when a signature cannot be recorded; the same call works once it can', async () => {
    app = await startWebhookApp({ replayFile: true, dir });
    // Root ignores permissions: a folder where the file should be makes every append fail (EISDIR).
    const replay = join(dir, 'state.json.replay');
    rmSync(replay, { force: true });
    mkdirSync(replay);
    const headers = signed({});
    const refused = await send(app, { what: 'unrecordable', headers, reason: 'replayed' });
    expect(refused).toMatchObject({ status: 503, body: { error: 'state_unavailable' } });
    expect(app.store.list()).toEqual([]);
    rmSync(replay, { recursive: true });
    // Not acted on, so not a replay: the caller's retry of the very same call goes through.
    expect((await send(app, { what: 'retry', headers, reason: 'replayed' })).status).toBe(202);
    expect(app.store.get('demo')?.host).toBe('api.example.com');
  });

  it('exports the failure counter from the start, at 0 for every reason', async () => {
    app = await startWebhookApp({ dir });
    const text = await app.metrics.registry.metrics();
    for (const reason of ['missing_credentials', 'bad_credentials', 'stale_timestamp', 'replayed'])
      expect(text).toContain(`kubebyon_haproxy_adapter_webhook_auth_failures_total{reason="${reason}"} 0`);
  });
});
