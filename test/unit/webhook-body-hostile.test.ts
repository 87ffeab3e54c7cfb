import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { sign } from '../../src/webhook/auth.js';
import { startWebhookApp, TEST_SECRET, type WebhookApp } from '../support/webhook-app.js';

// Defects the hostile-input property found, each pinned by name.
describe('webhook bodies', () => {
  let app: WebhookApp;
  beforeEach(async () => {
    app = await startWebhookApp({ bodyLimitBytes: 1024 * 1024 });
    await app.store.upsert({ name: 'demo', host: 'api.example.com', target: { nodePort: 30443 } });
  });
  afterEach(async () => {
    await app.stop();
  });

  const put = async (path: string, raw: Buffer, contentType?: string) => {
    const ts = String(Math.floor(Date.now() / 1000));
    const res = await fetch(`${app.base}${path}`, {
      method: 'PUT',
      body: raw,
      headers: {
        ...(contentType === undefined ? {} : { 'content-type': contentType }),
        'x-kubebyon-timestamp': ts,
        'x-kubebyon-signature': sign(TEST_SECRET, ts, 'PUT', path, raw),
      },
    });
    return { status: res.status, text: await res.text() };
  };

  it('refuses a body that is not valid UTF-8 with 400 invalid_utf8, instead of acting on U+FFFD', async () => {
    // "lo\xC0\xAFadbalancer" would read as a mode other than loadbalancer, and remove the route.
    const raw = Buffer.concat([
      Buffer.from('{"control_plane_host":"api.example.com","public_access_mode":"lo'),
      Buffer.from([0xc0, 0xaf]),
      Buffer.from('adbalancer","node_port":30443}'),
    ]);
    const res = await put('/v1/clusters/demo', raw, 'application/json');
    expect(res.status).toBe(400);
    expect(JSON.parse(res.text)).toMatchObject({ reason: 'invalid_utf8' });
    expect(app.store.get('demo')?.host).toBe('api.example.com');
  });

  it('refuses a body behind a byte order mark with 400 invalid_json, as the hostile-input property expects', async () => {
    const raw = Buffer.from(
      '\ufeff{"control_plane_host":"other.example.com","public_access_mode":"loadbalancer","node_port":30443}',
    );
    const res = await put('/v1/clusters/demo', raw, 'application/json');
    expect(res.status).toBe(400);
    expect(JSON.parse(res.text)).toMatchObject({ reason: 'invalid_json' });
    expect(app.store.get('demo')?.host).toBe('api.example.com');
  });

  it.each([
    'text/plain;charset=UTF-8',
    'application/x-www-form-urlencoded',
    'multipart/form-data; boundary=x',
    'application/json; charset=latin1',
    'application/json, text/plain',
  ])('refuses a body sent as %s with 415 before reading it', async (type) => {
    const raw = Buffer.from(
      '{"control_plane_host":"other.example.com","public_access_mode":"loadbalancer","node_port":30443}',
    );
    const res = await put('/v1/clusters/demo', raw, type);
    expect(res.status).toBe(415);
    expect(JSON.parse(res.text)).toMatchObject({ error: 'unsupported_media_type' });
    expect(app.store.get('demo')?.host).toBe('api.example.com');
  });

  it.each([undefined, 'application/json', 'Application/JSON; charset="UTF-8"'])(
    'takes a JSON body sent as %s',
    async (type) => {
      const raw = Buffer.from(
        '{"control_plane_host":"other.example.com","public_access_mode":"loadbalancer","node_port":30443}',
      );
      expect((await put('/v1/clusters/demo', raw, type)).status).toBe(202);
      expect(app.store.get('demo')?.host).toBe('other.example.com');
    },
  );

  it('answers a set of 20,000 bad items with a bounded error, not megabytes of issues', async () => {
    const raw = Buffer.from(`{"clusters":[${Array(20_000).fill('{}').join(',')}]}`);
    const res = await put('/v1/clusters', raw, 'application/json');
    expect(res.status).toBe(400);
    expect(res.text.length).toBeLessThan(16 * 1024);
    const body = JSON.parse(res.text);
    expect(body.issues).toHaveLength(20);
    expect(body.more_issues).toBeGreaterThan(20_000);
    expect(app.store.get('demo')?.host).toBe('api.example.com');
  });
});
