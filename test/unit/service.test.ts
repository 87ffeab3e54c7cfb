import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import pino from 'pino';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { main } from '../../src/cli/main.js';
import { loadConfig } from '../../src/config/env.js';
import { MemoryProvider } from '../../src/providers/memory/memory-provider.js';
import { type Service, startService } from '../../src/service.js';
import { sign } from '../../src/webhook/auth.js';
import { routedHosts } from '../support/owner.js';
import { freeLoopbackPort } from '../support/ports.js';
import { waitFor } from '../support/wait.js';
import { signedClient } from '../support/webhook-client.js';

const SECRET = 'service-test-secret-123';
const cluster = (host: string, nodePort: number) => ({
  control_plane_host: host,
  public_access_mode: 'loadbalancer',
  node_port: nodePort,
});

describe('startService (composition root)', () => {
  let dir: string;
  const started: Service[] = [];

  const start = async (provider: MemoryProvider, env: NodeJS.ProcessEnv = {}) => {
    const config = loadConfig({
      KUBEBYON_HAPROXY_ROUTING: 'rules',
      KUBEBYON_LISTEN_ADDR: `127.0.0.1:${await freeLoopbackPort()}`,
      KUBEBYON_STATE_FILE: join(dir, 'clusters.json'),
      KUBEBYON_WEBHOOK_SECRET: SECRET,
      KUBEBYON_DATAPLANE_PASSWORD: 'unused-by-the-memory-provider',
      KUBEBYON_STATIC_NODE_ADDRESSES: '10.0.0.1,10.0.0.2',
      KUBEBYON_RECONCILE_DEBOUNCE_MS: '10',
      KUBEBYON_RESYNC_INTERVAL_MS: '0',
      KUBEBYON_RECONCILE_RETRIES: '0',
      KUBEBYON_HAPROXY_WATCH_MS: '0',
      ...env,
    });
    const service = await startService(config, { provider, logger: pino({ level: 'silent' }) });
    started.push(service);
    return { service, client: signedClient(service.url, SECRET) };
  };

  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'kubebyon-service-'));
  });
  afterEach(async () => {
    for (const s of started.splice(0)) await s.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('KUBEBYON_PROVIDER=memory runs the whole service with no HAProxy (to try the API)', async () => {
    const config = loadConfig({
      KUBEBYON_HAPROXY_ROUTING: 'rules',
      KUBEBYON_PROVIDER: 'memory',
      KUBEBYON_OWNER_ID: 'try-out',
      KUBEBYON_LISTEN_ADDR: `127.0.0.1:${await freeLoopbackPort()}`,
      KUBEBYON_STATE_FILE: join(dir, 'clusters.json'),
      KUBEBYON_WEBHOOK_SECRET: SECRET,
      KUBEBYON_STATIC_NODE_ADDRESSES: '127.0.0.1',
      KUBEBYON_RECONCILE_DEBOUNCE_MS: '10',
    });
    expect(config.provider).toEqual({ kind: 'memory' });
    const service = await startService(config, { logger: pino({ level: 'silent' }) });
    started.push(service);
    const client = signedClient(service.url, SECRET);
    const put = await client.request(
      'PUT',
      '/v1/clusters/demo?wait=true',
      cluster('api.demo.example.com', 30443),
    );
    expect(put.status).toBe(200);
    expect(put.body).toMatchObject({ state: 'applied' });
    const plan = await client.request('GET', '/v1/plan');
    expect(plan.body).toMatchObject({ operations: [] });
  });

  it('after a restart, converges a fresh HAProxy to everything accepted before', async () => {
    const first = new MemoryProvider();
    const a = await start(first);
    expect(
      (await a.client.request('PUT', '/v1/clusters/one?wait=true', cluster('one.example.com', 31001))).status,
    ).toBe(200);
    expect(
      (await a.client.request('PUT', '/v1/clusters/two', cluster('two.example.com', 31002))).status,
    ).toBe(202);
    await a.service.stop();

    const fresh = new MemoryProvider();
    const b = await start(fresh);
    await waitFor(() => fresh.applies.length > 0, 5000, 'the new service to apply the stored clusters', {
      everyMs: 20,
    });
    expect(routedHosts(fresh.state)).toEqual(['one.example.com', 'two.example.com']);
    expect(
      fresh.state.backends.flatMap((x) => x.servers.map((s) => `${s.address}:${s.port}`)).sort(),
    ).toEqual(['10.0.0.1:31001', '10.0.0.1:31002', '10.0.0.2:31001', '10.0.0.2:31002']);
    const list = await b.client.request('GET', '/v1/clusters');
    expect(list.body.clusters.map((c: { state: string }) => c.state)).toEqual(['applied', 'applied']);
  });

  it('refuses a write replayed after a restart, within the replay window', async () => {
    const a = await start(new MemoryProvider());
    expect(
      (await a.client.request('PUT', '/v1/clusters/demo?wait=true', cluster('demo.example.com', 31001)))
        .status,
    ).toBe(200);
    // A captured DELETE, sent once as intended.
    const ts = String(Math.floor(Date.now() / 1000));
    const headers = {
      'x-kubebyon-timestamp': ts,
      'x-kubebyon-signature': sign(SECRET, ts, 'DELETE', '/v1/clusters/demo', Buffer.alloc(0)),
    };
    expect((await fetch(`${a.service.url}/v1/clusters/demo`, { method: 'DELETE', headers })).status).toBe(
      202,
    );
    await a.service.stop();

    const b = await start(new MemoryProvider());
    expect(
      (await b.client.request('PUT', '/v1/clusters/demo?wait=true', cluster('again.example.com', 31002)))
        .status,
    ).toBe(200);
    const replay = await fetch(`${b.service.url}/v1/clusters/demo`, { method: 'DELETE', headers });
    expect(replay.status).toBe(401);
    expect(await replay.json()).toEqual({ error: 'unauthorized', reason: 'replayed' });
    expect(b.service.store.get('demo')?.host).toBe('again.example.com');
    expect((await b.client.request('GET', '/v1/clusters/demo')).body).toMatchObject({ state: 'applied' });
  });

  it('is ready only when HAProxy answers and a reconcile has succeeded', async () => {
    const provider = new MemoryProvider();
    provider.down = new Error('connect ECONNREFUSED 127.0.0.1:5555');
    const { service, client } = await start(provider);
    await client.request('POST', '/v1/reconcile?wait=true');
    const notReady = await fetch(`${service.url}/readyz`);
    expect(notReady.status).toBe(503);
    // Without credentials only the verdicts; the reason (an internal address) needs a signed call.
    expect(((await notReady.json()) as { checks: Record<string, unknown> }).checks.haproxy).toEqual({
      ok: false,
    });
    const detailed = await client.request('GET', '/v1/readyz');
    expect(detailed.status).toBe(503);
    expect(detailed.body.checks.haproxy).toEqual({
      ok: false,
      detail: 'connect ECONNREFUSED 127.0.0.1:5555',
    });
    provider.down = undefined;
    // The failed pass is tried again by itself: readiness follows without another call.
    const ready = await waitFor(
      () => fetch(`${service.url}/readyz`),
      10_000,
      'readiness once HAProxy answers',
      {
        ok: (r) => r.status === 200,
      },
    );
    expect(ready.status).toBe(200);
    expect(((await ready.json()) as { checks: unknown }).checks).toEqual({
      state: { ok: true },
      haproxy: { ok: true },
      reconcile: { ok: true },
    });
  });

  it('is not ready while the state cannot be stored', async () => {
    const { service, client } = await start(new MemoryProvider());
    await client.request('POST', '/v1/reconcile?wait=true');
    expect((await fetch(`${service.url}/readyz`)).status).toBe(200);
    // Tests run as root, whom permissions do not stop: folders where the journal and the snapshot go fail
    // both ways of storing a change.
    for (const f of ['clusters.json.journal', 'clusters.json']) {
      rmSync(join(dir, f), { force: true });
      mkdirSync(join(dir, f));
    }
    expect((await client.request('PUT', '/v1/clusters/one', cluster('one.example.com', 31001))).status).toBe(
      503,
    );
    const res = await client.request('GET', '/v1/readyz');
    expect(res.status).toBe(503);
    expect(res.body.checks.state).toMatchObject({
      ok: false,
      detail: expect.stringMatching(/^last write failed: /),
    });
  });

  it('answers the status command with every cluster and its state', async () => {
    const { service, client } = await start(new MemoryProvider());
    await client.request('PUT', '/v1/clusters/first', cluster('api.example.com', 31001));
    await client.request('PUT', '/v1/clusters/second?wait=true', cluster('API.example.com', 31002));
    const run = async (args: string[], env: NodeJS.ProcessEnv) => {
      const out: string[] = [];
      const err: string[] = [];
      const code = await main(args, env, { out: (l) => out.push(l), err: (l) => err.push(l) });
      return { code, out, err };
    };
    const env = { KUBEBYON_ADAPTER_URL: service.url, KUBEBYON_WEBHOOK_SECRET: SECRET };
    const table = await run(['status'], env);
    expect(table.code).toBe(0);
    expect(table.out[0]).toMatch(/^NAME\s+HOST\s+STATE\s+API ENDPOINT\s+LAST APPLIED\s+REASON$/);
    expect(table.out[1]).toMatch(
      /^first\s+api\.example\.com\s+applied\s+https:\/\/api\.example\.com:443\s+\d{4}-/,
    );
    expect(table.out[2]).toMatch(
      /^second\s+api\.example\.com\s+rejected\s+-\s+-\s+host_claimed_by_other_cluster: .*cluster first$/,
    );
    // Then host -> backend -> servers, for the routed cluster only.
    expect(table.out.slice(3)).toEqual([
      '',
      expect.stringMatching(/^HOST\s+BACKEND\s+SERVERS$/),
      expect.stringMatching(
        /^api\.example\.com\s+kubebyon_slot_00001\s+10\.0\.0\.1:31001,10\.0\.0\.2:31001$/,
      ),
    ]);
    const json = await run(['status', '--json'], env);
    expect(JSON.parse(json.out.join('\n'))).toEqual([
      expect.objectContaining({
        state: 'applied',
        backend: 'kubebyon_slot_00001',
        servers: ['10.0.0.1:31001', '10.0.0.2:31001'],
      }),
      expect.objectContaining({ state: 'rejected', backend: null, servers: [] }),
    ]);
    expect((await run(['status'], { ...env, KUBEBYON_WEBHOOK_SECRET: 'not-the-secret-at-all' })).code).toBe(
      1,
    );
    expect(
      (
        await run(['status'], {
          ...env,
          KUBEBYON_ADAPTER_URL: `http://127.0.0.1:${await freeLoopbackPort()}`,
        })
      ).code,
    ).toBe(1);
  });

  it('with map routing, reports the slot serving each host, and watches HAProxy for reloads by anyone', async () => {
    const provider = new MemoryProvider();
    provider.revisionToken = 'worker-1';
    const { client, service } = await start(provider, {
      KUBEBYON_HAPROXY_ROUTING: 'map',
      KUBEBYON_HAPROXY_WATCH_MS: '50',
    });
    await client.request('POST', '/v1/reconcile?wait=true');
    const put = await client.request(
      'PUT',
      '/v1/clusters/first?wait=true',
      cluster('api.example.com', 31001),
    );
    expect(put.body).toMatchObject({
      state: 'applied',
      backend: expect.stringMatching(/^kubebyon_slot_\d{5}$/),
      servers: ['10.0.0.1:31001', '10.0.0.2:31001'],
    });
    // The webhook named its cluster: its pass planned that cluster's host only.
    const metrics = await (await fetch(`${service.url}/metrics`)).text();
    expect(metrics).toMatch(/^kubebyon_haproxy_adapter_reconcile_passes_total\{scope="scoped"\} 1$/m);
    const entries = () => provider.state.maps?.[0]?.entries ?? new Map();
    expect(entries().get('api.example.com')).toBe(put.body.backend);
    // A reload by someone else that lost the runtime map entry: back within a poll and a pass.
    const map = provider.state.maps?.[0]?.name ?? '';
    provider.state = { ...provider.state, maps: [{ name: map, entries: new Map() }] };
    provider.revisionToken = 'worker-2';
    await waitFor(() => entries().get('api.example.com') === put.body.backend, 2_000, 'the map entry back', {
      everyMs: 10,
    });
  });

  it('on stop, finishes the change in flight, then refuses new calls', async () => {
    const provider = new MemoryProvider();
    const { service, client } = await start(provider);
    await client.request('POST', '/v1/reconcile?wait=true');
    // The call is acknowledged and stored, and its pass waits at the provider, when stop begins.
    let release = () => {};
    provider.gate = new Promise<void>((resolve) => {
      release = resolve;
    });
    const inFlight = client.request('PUT', '/v1/clusters/late?wait=true', cluster('late.example.com', 31003));
    await waitFor(() => service.store.get('late') !== undefined, 5_000, 'the change to be stored', {
      everyMs: 5,
    });
    const stopped = service.stop();
    await sleep(50);
    release();
    await stopped;
    expect((await inFlight).status).toBe(200);
    expect(routedHosts(provider.state)).toEqual(['late.example.com']);
    await expect(fetch(`${service.url}/healthz`)).rejects.toThrow();
  });

  it('on stop, applies a change that was stored but whose pass had not begun', async () => {
    const provider = new MemoryProvider();
    const { service, client } = await start(provider);
    await client.request('POST', '/v1/reconcile?wait=true');
    const inFlight = client.request('PUT', '/v1/clusters/late?wait=true', cluster('late.example.com', 31003));
    // Stop as soon as the change is on disk: the debounce has not even started its pass.
    await waitFor(() => service.store.get('late') !== undefined, 5_000, 'the change to be stored', {
      everyMs: 0,
    });
    await service.stop();
    expect((await inFlight).status).toBe(200);
    expect(routedHosts(provider.state)).toEqual(['late.example.com']);
  });
});
