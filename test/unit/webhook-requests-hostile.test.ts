import { METHODS } from 'node:http';
import { connect } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { sign } from '../../src/webhook/auth.js';
import { rawRequest, within } from '../support/raw-http.js';
import { startWebhookApp, TEST_SECRET, type WebhookApp } from '../support/webhook-app.js';

const LONG = 20_000;
const now = () => String(Math.floor(Date.now() / 1000));
const cluster = JSON.stringify({
  control_plane_host: 'api.example.com',
  public_access_mode: 'loadbalancer',
  node_port: 30443,
});

/** Sends `text` on a fresh connection and resolves with all the server sent once it closes. */
function exchange(port: number, text: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1');
    let got = '';
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`no close within 5 s; got ${JSON.stringify(got.slice(0, 200))}`));
    }, 5000);
    socket.on('data', (d: Buffer) => {
      got += d.toString('latin1');
    });
    socket.on('error', () => {});
    socket.on('close', () => {
      clearTimeout(timer);
      resolve(got);
    });
    socket.write(text);
  });
}

describe('webhook requests that are well-formed HTTP but hostile', () => {
  let app: WebhookApp;
  afterEach(async () => {
    await app?.stop();
  });

  it(
    'answers Expect: 100-continue without credentials with 401 alone, and sends 100 only to checked headers',
    async () => {
      app = await startWebhookApp();
      const head = (credentials: string[]) => [
        'PUT /v1/clusters/demo HTTP/1.1',
        'host: 127.0.0.1',
        'expect: 100-continue',
        `content-length: ${cluster.length}`,
        ...credentials,
      ];
      const anonymous = rawRequest(app.port, head([]));
      expect((await anonymous.response).status).toBe(401);
      expect(JSON.parse((await anonymous.response).body)).toEqual({
        error: 'unauthorized',
        reason: 'missing_credentials',
      });
      await within(anonymous.closed, 5000, 'the server closes the connection');
      const stale = rawRequest(
        app.port,
        head([
          `x-kubebyon-timestamp: ${Number(now()) - 400}`,
          `x-kubebyon-signature: sha256=${'0'.repeat(64)}`,
        ]),
      );
      expect((await stale.response).status).toBe(401);
      // Headers that pass every check possible before the body: invited to send it.
      const ts = now();
      const signed = rawRequest(
        app.port,
        head([
          `x-kubebyon-timestamp: ${ts}`,
          `x-kubebyon-signature: ${sign(TEST_SECRET, ts, 'PUT', '/v1/clusters/demo', Buffer.from(cluster))}`,
        ]),
      );
      expect((await signed.response).status).toBe(100);
      signed.socket.write(cluster);
      await expect.poll(() => app.store.get('demo')?.host, { timeout: 5000 }).toBe('api.example.com');
      signed.socket.destroy();
    },
    LONG,
  );

  it(
    'refuses a request with two Host headers with 400, whatever it asks for',
    async () => {
      app = await startWebhookApp();
      for (const [path, hosts] of [
        ['/healthz', ['127.0.0.1', 'evil.example.com']],
        ['/v1/clusters', ['127.0.0.1', '127.0.0.1']],
      ] as const) {
        const got = await exchange(
          app.port,
          `GET ${path} HTTP/1.1\r\n${hosts.map((h) => `Host: ${h}\r\n`).join('')}\r\n`,
        );
        expect(got).toMatch(/^HTTP\/1\.1 400 /);
        expect(JSON.parse(got.slice(got.indexOf('\r\n\r\n') + 4))).toMatchObject({
          error: 'invalid_request',
          reason: 'duplicate_host',
        });
      }
      expect((await fetch(`${app.base}/healthz`)).status).toBe(200);
    },
    LONG,
  );

  it(
    'refuses a cluster name no PUT could store with 400 on every verb, and changes nothing',
    async () => {
      app = await startWebhookApp();
      const { client } = app;
      await client.request('PUT', '/v1/clusters/keep', JSON.parse(cluster));
      for (const name of ['%00', 'a%0Ab', '-lead', 'x'.repeat(254), 'bad%20name']) {
        const path = `/v1/clusters/${name}`;
        for (const method of ['PUT', 'DELETE', 'GET']) {
          const res = await client.request(method, path, method === 'PUT' ? JSON.parse(cluster) : undefined);
          expect({ method, name, status: res.status, body: res.body }).toEqual({
            method,
            name,
            status: 400,
            body: expect.objectContaining({ field: 'name', reason: 'cluster_name_invalid' }),
          });
        }
      }
      expect(app.store.list().map((c) => c.name)).toEqual(['keep']);
    },
    LONG,
  );

  it(
    'counts requests of methods the API does not serve under one method label',
    async () => {
      app = await startWebhookApp();
      // Every method Node's parser takes (CONNECT is a tunnel, never a request), without credentials.
      const methods = METHODS.filter((m) => m !== 'CONNECT');
      expect(methods.length).toBeGreaterThan(30);
      for (const method of methods)
        await exchange(
          app.port,
          `${method} /v1/clusters HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n`,
        );
      const { values } = await app.metrics.webhookRequests.get();
      const labels = new Set(values.map((v) => String(v.labels.method)));
      expect([...labels].sort()).toEqual(['DELETE', 'GET', 'HEAD', 'POST', 'PUT', 'other']);
      const counted = values.reduce((sum, v) => sum + v.value, 0);
      expect(counted).toBe(methods.length);
    },
    LONG,
  );
});
