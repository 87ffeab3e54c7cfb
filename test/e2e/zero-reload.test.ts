import { readFileSync } from 'node:fs';
import { connect, type TLSSocket } from 'node:tls';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { haproxyVersionUnderTest } from '../support/haproxy-testbed.js';
import type { ServiceProcess } from '../support/service-process.js';
import { startVersionServer, type VersionServer, waitForIdentity } from '../support/version-server.js';
import { type E2eHaproxy, startE2eHaproxy } from './fixture.js';

// Map routing as it ships: after the first pass, clusters come, move and go through the runtime API only —
// HAProxy's own load count proves no reload — and every claim is checked by a TLS handshake carrying SNI.
const MAP = { KUBEBYON_STATIC_NODE_ADDRESSES: '127.0.0.1', KUBEBYON_HAPROXY_ROUTING: 'map' };

describe(`end to end, map routing without reloads, HAProxy ${haproxyVersionUnderTest()}`, () => {
  let e: E2eHaproxy;
  let service: ServiceProcess | undefined;
  const servers: Record<string, VersionServer> = {};
  const endpoint = (host: string) => `https://${host}:${e.sniPort}`;
  const body = (host: string, server: string) => ({
    control_plane_host: host,
    public_access_mode: 'loadbalancer',
    node_port: servers[server]?.port ?? 0,
  });
  const put = (name: string, host: string, server: string) =>
    (service as ServiceProcess).client.request('PUT', `/v1/clusters/${name}?wait=true`, body(host, server));
  const closed = (host: string) => waitForIdentity(endpoint(host), null);
  const workers = async () =>
    (await e.haproxy.masterCli('show proc')).split('\n').filter((l) => / worker /.test(l)).length;

  beforeAll(async () => {
    for (const name of ['alpha', 'beta']) servers[name] = await startVersionServer(name);
    e = await startE2eHaproxy();
  });
  afterAll(async () => {
    await service?.stop();
    await e?.stop();
    await Promise.all(Object.values(servers).map((s) => s.close()));
  });
  let round = 0;
  beforeEach(async () => {
    service = await e.startService(MAP);
    // A distinct query each round: the same signed request twice within its clock window is a replay (401).
    const res = await service.client.request('PUT', `/v1/clusters?wait=true&round=${round++}`, {
      clusters: [],
    });
    expect(res.status).toBe(200);
  });
  afterEach(async () => {
    await service?.stop();
    service = undefined;
    expect(await e.operatorServes()).toBe(true);
  });

  it('adds, moves and deletes clusters with no reload, each proven by SNI', async () => {
    const loads = await e.loads();
    for (const n of [1, 2, 3]) {
      expect((await put(`c${n}`, `api.c${n}.example.com`, 'alpha')).status).toBe(200);
      expect(await waitForIdentity(endpoint(`api.c${n}.example.com`), 'alpha')).toEqual({
        identity: 'alpha',
        status: 200,
      });
    }
    expect((await put('c2', 'api.c2.example.com', 'beta')).status).toBe(200);
    expect(await waitForIdentity(endpoint('api.c2.example.com'), 'beta')).toEqual({
      identity: 'beta',
      status: 200,
    });
    // Any case of the SNI reaches the route: the frontend lower-cases before the map lookup.
    expect(await waitForIdentity(endpoint('API.C1.Example.COM'), 'alpha')).toEqual({
      identity: 'alpha',
      status: 200,
    });
    expect((await service?.client.request('DELETE', '/v1/clusters/c3?wait=true'))?.status).toBe(200);
    await closed('api.c3.example.com');
    expect(await e.loads()).toBe(loads);
  });

  it('keeps a held TLS stream open through 100 changes of other clusters, with one worker left', async () => {
    expect((await put('held', 'api.held.example.com', 'alpha')).status).toBe(200);
    await waitForIdentity(endpoint('api.held.example.com'), 'alpha');
    const loads = await e.loads();
    const stream: TLSSocket = connect({
      host: '127.0.0.1',
      port: e.sniPort,
      servername: 'api.held.example.com',
      rejectUnauthorized: false,
    });
    let streamClosed = false;
    stream.on('close', () => {
      streamClosed = true;
    });
    stream.on('error', () => {});
    await new Promise<void>((resolve) => stream.once('secureConnect', () => resolve()));
    for (let i = 0; i < 50; i++)
      expect((await put(`w${i}`, `api.w${i}.example.com`, 'beta')).status).toBe(200);
    for (let i = 0; i < 50; i++)
      expect((await service?.client.request('DELETE', `/v1/clusters/w${i}?wait=true`))?.status).toBe(200);
    expect(streamClosed).toBe(false);
    expect(await e.loads()).toBe(loads);
    expect(await workers()).toBe(1);
    stream.destroy();
  });

  it('repairs a map entry deleted by hand at runtime on the next resync', async () => {
    await service?.stop();
    service = await e.startService({ ...MAP, KUBEBYON_RESYNC_INTERVAL_MS: '1000' });
    expect((await put('hand', 'api.hand.example.com', 'alpha')).status).toBe(200);
    await waitForIdentity(endpoint('api.hand.example.com'), 'alpha');
    const map = (await e.haproxy.masterCli('@1 show map')).split('\n').find((l) => l.includes('.sni.map'));
    const path = /([^\s()]+\.sni\.map)/.exec(map ?? '')?.[1];
    expect(path).toBeDefined();
    expect(await e.haproxy.masterCli(`@1 del map ${path} api.hand.example.com`)).not.toMatch(
      /not found|unknown/i,
    );
    expect(await waitForIdentity(endpoint('api.hand.example.com'), 'alpha', { timeoutMs: 5_000 })).toEqual({
      identity: 'alpha',
      status: 200,
    });
  });

  it('moves an install with one backend and rule per cluster to the map in one pass with one reload', async () => {
    await service?.stop();
    service = await e.startService({ ...MAP, KUBEBYON_HAPROXY_ROUTING: 'rules' });
    for (const n of [1, 2]) expect((await put(`u${n}`, `api.u${n}.example.com`, 'alpha')).status).toBe(200);
    await service.stop();
    expect(e.haproxy.owned && readFileSync(e.haproxy.owned.path, 'utf8')).toMatch(/req\.ssl_sni -i api\.u1/);
    const loads = await e.loads();
    service = await e.startService(MAP);
    expect((await service.client.request('POST', '/v1/reconcile?wait=true')).status).toBe(200);
    for (const n of [1, 2])
      expect(await waitForIdentity(endpoint(`api.u${n}.example.com`), 'alpha')).toEqual({
        identity: 'alpha',
        status: 200,
      });
    expect(await e.loads()).toBe(loads + 1);
    const owned = readFileSync(e.haproxy.owned?.path ?? '', 'utf8');
    expect(owned).not.toMatch(/req\.ssl_sni -i/);
    expect(owned).toMatch(/map\(/);
  });
});
