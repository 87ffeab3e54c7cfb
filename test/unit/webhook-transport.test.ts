import { gzipSync } from 'node:zlib';
import { afterEach, describe, expect, it } from 'vitest';
import { sign } from '../../src/webhook/auth.js';
import { rawRequest, within } from '../support/raw-http.js';
import {
  startWebhookApp,
  TEST_SECRET,
  type WebhookApp,
  type WebhookAppOptions,
} from '../support/webhook-app.js';

// Bounds here are generous (seconds for what takes milliseconds): they only turn a hang into a failure.
const LONG = 20_000;
const now = () => String(Math.floor(Date.now() / 1000));
// Well-formed credentials that pass every check possible before the body: its HMAC cannot be known yet.
const formOnly = (ts = now()) => [
  `x-kubebyon-timestamp: ${ts}`,
  `x-kubebyon-signature: sha256=${'0'.repeat(64)}`,
];
const head = (method: string, path: string, headers: string[]) => [
  `${method} ${path} HTTP/1.1`,
  'host: 127.0.0.1',
  ...headers,
];
const cluster = JSON.stringify({
  control_plane_host: 'api.example.com',
  public_access_mode: 'loadbalancer',
  node_port: 30443,
});

describe('webhook transport limits', () => {
  let app: WebhookApp;
  const start = async (o: WebhookAppOptions = {}) => {
    app = await startWebhookApp(o);
    return app;
  };
  afterEach(async () => {
    await app?.stop();
  });

  it(
    'answers a body declared over the limit with 413 at once, without reading it',
    async () => {
      const { port, store } = await start({ bodyLimitBytes: 64 * 1024 });
      // Headers only: the answer can come only if the server does not wait for the 10 MiB.
      const x = rawRequest(
        port,
        head('PUT', '/v1/clusters/big', [...formOnly(), 'content-length: 10485760']),
      );
      const res = await x.response;
      expect(res.status).toBe(413);
      expect(JSON.parse(res.body)).toMatchObject({ error: 'payload_too_large' });
      await within(x.closed, 5000, 'the server closes the connection');
      expect(store.list()).toEqual([]);
    },
    LONG,
  );

  it.each([
    ['no credentials', [], 'missing_credentials'],
    ['only a timestamp', [`x-kubebyon-timestamp: ${now()}`], 'missing_credentials'],
    [
      'a short signature',
      [`x-kubebyon-timestamp: ${now()}`, 'x-kubebyon-signature: sha256=abc'],
      'bad_credentials',
    ],
    [
      'another algorithm',
      [`x-kubebyon-timestamp: ${now()}`, `x-kubebyon-signature: md5=${'0'.repeat(64)}`],
      'bad_credentials',
    ],
    ['a stale timestamp', formOnly(String(Math.floor(Date.now() / 1000) - 301)), 'stale_timestamp'],
    ['a timestamp that is not a number', formOnly('soon'), 'stale_timestamp'],
  ])(
    'refuses a call with %s with 401 before its body is sent',
    async (_what, headers, reason) => {
      const { port, store } = await start();
      const x = rawRequest(port, head('PUT', '/v1/clusters/demo', [...headers, 'content-length: 1000']));
      const res = await x.response;
      expect(res.status).toBe(401);
      expect(JSON.parse(res.body)).toEqual({ error: 'unauthorized', reason });
      await within(x.closed, 5000, 'the server closes the connection');
      expect(store.list()).toEqual([]);
    },
    LONG,
  );

  it(
    'in bearer mode, checks the token before the body is sent',
    async () => {
      const { port, base, store } = await start({ authMode: 'bearer' });
      for (const [authorization, reason] of [
        ['Basic YWRtaW46YWRtaW4=', 'missing_credentials'],
        ['Bearer not-the-secret', 'bad_credentials'],
      ]) {
        const x = rawRequest(
          port,
          head('PUT', '/v1/clusters/demo', [`authorization: ${authorization}`, 'content-length: 1000']),
        );
        const res = await x.response;
        expect(res.status).toBe(401);
        expect(JSON.parse(res.body)).toEqual({ error: 'unauthorized', reason });
      }
      const ok = await fetch(`${base}/v1/clusters/demo`, {
        method: 'PUT',
        body: cluster,
        headers: { authorization: `Bearer ${TEST_SECRET}`, 'content-type': 'application/json' },
      });
      expect(ok.status).toBe(202);
      expect(store.get('demo')?.host).toBe('api.example.com');
    },
    LONG,
  );

  it(
    'cuts off a body that is not sent within the body time limit',
    async () => {
      const { port, store } = await start({ bodyTimeoutMs: 300 });
      const partial = rawRequest(
        port,
        head('PUT', '/v1/clusters/slow', [...formOnly(), 'content-length: 100']),
        '{"co',
      );
      const res = await partial.response;
      expect(res.status).toBe(408);
      expect(JSON.parse(res.body)).toMatchObject({ error: 'request_timeout' });
      await within(partial.closed, 5000, 'the server closes the connection');
      expect(store.list()).toEqual([]);
    },
    LONG,
  );

  it(
    'answers a chunked body with 413 once it passes the limit',
    async () => {
      const { port } = await start({ bodyLimitBytes: 2048 });
      const chunk = 'x'.repeat(1024);
      const body = `400\r\n${chunk}\r\n`.repeat(3);
      const x = rawRequest(
        port,
        head('PUT', '/v1/clusters/big', [...formOnly(), 'transfer-encoding: chunked']),
        body,
      );
      const res = await x.response;
      expect(res.status).toBe(413);
      expect(JSON.parse(res.body)).toMatchObject({ error: 'payload_too_large' });
      await within(x.closed, 5000, 'the server closes the connection');
    },
    LONG,
  );

  it(
    'answers body-encoding problems with what was wrong, and never logs them at error level',
    async () => {
      const { base, store, logLines } = await start();
      const send = async (encoding: string, raw: Buffer, signedBody?: Buffer) => {
        const ts = now();
        const headers: Record<string, string> = {
          'content-encoding': encoding,
          'content-type': 'application/json',
        };
        if (signedBody) {
          headers['x-kubebyon-timestamp'] = ts;
          headers['x-kubebyon-signature'] = sign(TEST_SECRET, ts, 'PUT', '/v1/clusters/demo', signedBody);
        }
        const res = await fetch(`${base}/v1/clusters/demo`, { method: 'PUT', body: raw, headers });
        return { status: res.status, body: await res.json() };
      };
      const junk = Buffer.from('this is not gzip at all');
      expect(await send('bogus', Buffer.from(cluster))).toEqual({
        status: 401,
        body: { error: 'unauthorized', reason: 'missing_credentials' },
      });
      expect(await send('gzip', junk)).toEqual({
        status: 401,
        body: { error: 'unauthorized', reason: 'missing_credentials' },
      });
      expect(await send('bogus', Buffer.from(cluster), Buffer.from(cluster))).toMatchObject({
        status: 415,
        body: { error: 'unsupported_content_encoding' },
      });
      expect(await send('gzip', junk, junk)).toMatchObject({
        status: 400,
        body: { error: 'invalid_request', reason: 'bad_content_encoding' },
      });
      expect(store.list()).toEqual([]);
      // A compressed body is still accepted, signed as decoded (as before).
      expect((await send('gzip', gzipSync(cluster), Buffer.from(cluster))).status).toBe(202);
      expect(store.get('demo')?.host).toBe('api.example.com');
      expect(logLines.filter((l) => l.level >= 50)).toEqual([]);
      expect(JSON.stringify(logLines)).not.toContain('"stack"');
    },
    LONG,
  );
});
