import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config/env.js';
import { type Service, startService } from '../../src/service.js';
import { freeLoopbackPort } from '../support/ports.js';
import { signedClient } from '../support/webhook-client.js';

// The whole service driving two HAProxy instances (the memory provider, one per instance) through the
// webhook API, beside the one-instance service whose answers must not change.

const SECRET = 'fleet-service-test-secret';
const TWO = JSON.stringify([{ name: 'a' }, { name: 'b' }]);
const cluster = (host: string, nodePort: number) => ({
  control_plane_host: host,
  public_access_mode: 'loadbalancer',
  node_port: nodePort,
});

/** The sample lines of a metric family in a scrape. */
const samples = (text: string, family: string) =>
  text.split('\n').filter((l) => l.startsWith(`kubebyon_haproxy_adapter_${family}{`));

describe('startService with several HAProxy instances', () => {
  let dir: string;
  const started: Service[] = [];

  const start = async (env: NodeJS.ProcessEnv = {}) => {
    const config = loadConfig({
      KUBEBYON_PROVIDER: 'memory',
      KUBEBYON_HAPROXY_ROUTING: 'rules',
      KUBEBYON_LISTEN_ADDR: `127.0.0.1:${await freeLoopbackPort()}`,
      KUBEBYON_STATE_FILE: join(dir, 'clusters.json'),
      KUBEBYON_WEBHOOK_SECRET: SECRET,
      KUBEBYON_STATIC_NODE_ADDRESSES: '10.0.0.1,10.0.0.2',
      KUBEBYON_RECONCILE_DEBOUNCE_MS: '10',
      KUBEBYON_RESYNC_INTERVAL_MS: '0',
      KUBEBYON_RECONCILE_RETRIES: '0',
      KUBEBYON_HAPROXY_WATCH_MS: '0',
      ...env,
    });
    const service = await startService(config, { logger: pino({ level: 'silent' }) });
    started.push(service);
    return { service, client: signedClient(service.url, SECRET) };
  };
  const scrape = async (service: Service) => (await fetch(`${service.url}/metrics`)).text();

  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'kubebyon-fleet-service-'));
  });
  afterEach(async () => {
    for (const s of started.splice(0)) await s.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('answers a waited PUT once every instance applied it, naming each', async () => {
    const { client } = await start({ KUBEBYON_HAPROXY_INSTANCES: TWO });
    const put = await client.request(
      'PUT',
      '/v1/clusters/demo?wait=true',
      cluster('demo.example.com', 30443),
    );
    expect(put.status).toBe(200);
    expect(put.body).toMatchObject({ name: 'demo', state: 'applied', reason: null });
    expect(put.body.last_applied_at).toEqual(expect.any(String));
    expect(put.body.instances).toEqual([
      { name: 'a', state: 'applied', reason: null, last_applied_at: expect.any(String) },
      { name: 'b', state: 'applied', reason: null, last_applied_at: expect.any(String) },
    ]);

    const one = await client.request('GET', '/v1/clusters/demo');
    expect(one.body).toMatchObject({ state: 'applied', instances: [{ name: 'a' }, { name: 'b' }] });
    const all = await client.request('GET', '/v1/clusters');
    expect(all.status).toBe(200);
    expect(all.body.clusters).toHaveLength(1);
    expect(
      all.body.clusters[0].instances.map((i: { name: string; state: string }) => [i.name, i.state]),
    ).toEqual([
      ['a', 'applied'],
      ['b', 'applied'],
    ]);
  });

  it('labels each instance`s metrics with its name, and is ready', async () => {
    const { service, client } = await start({ KUBEBYON_HAPROXY_INSTANCES: TWO });
    expect(
      (await client.request('PUT', '/v1/clusters/demo?wait=true', cluster('demo.example.com', 30443))).status,
    ).toBe(200);
    const text = await scrape(service);
    const reconciles = samples(text, 'reconciles_total');
    for (const instance of ['a', 'b'])
      expect(reconciles).toContainEqual(
        expect.stringMatching(new RegExp(`^\\S+\\{result="changed",haproxy="${instance}"\\} [1-9]\\d*$`)),
      );
    // No series of a pass without an instance.
    expect(reconciles.filter((l) => !l.includes('haproxy="'))).toEqual([]);
    expect(text).toMatch(/^kubebyon_haproxy_adapter_haproxy_instances 2$/m);

    const ready = await client.request('GET', '/v1/readyz');
    expect(ready.status).toBe(200);
    expect(ready.body).toMatchObject({ ready: true, checks: { haproxy: { ok: true } } });
    expect(ready.body.checks.haproxy).not.toHaveProperty('detail');
    expect((await fetch(`${service.url}/readyz`)).status).toBe(200);
  });

  it('keeps one instance`s answers as before: no instances field, no haproxy label', async () => {
    const { service, client } = await start();
    const put = await client.request(
      'PUT',
      '/v1/clusters/demo?wait=true',
      cluster('demo.example.com', 30443),
    );
    expect(put.status).toBe(200);
    expect(put.body).toMatchObject({ state: 'applied' });
    expect(put.body).not.toHaveProperty('instances');
    const all = await client.request('GET', '/v1/clusters');
    expect(all.body.clusters[0]).not.toHaveProperty('instances');

    const text = await scrape(service);
    expect(samples(text, 'reconciles_total')).toContainEqual(
      expect.stringMatching(/^\S+\{result="changed"\} [1-9]\d*$/),
    );
    expect(text).not.toMatch(/haproxy="/);
    const ready = await client.request('GET', '/v1/readyz');
    expect(ready.body).toMatchObject({
      ready: true,
      checks: { haproxy: { ok: true }, reconcile: { ok: true } },
    });
  });
});
