import { readFileSync } from 'node:fs';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { haproxyVersionUnderTest } from '../support/haproxy-testbed.js';
import type { ServiceProcess } from '../support/service-process.js';
import {
  getVersion,
  startVersionServer,
  type VersionServer,
  waitForIdentity,
} from '../support/version-server.js';
import { type E2eHaproxy, startE2eHaproxy } from './fixture.js';

// The service as it ships (dist/, its own process, configured by the environment) in front of a real
// HAProxy: every claim is proven by a TLS client that sends the cluster's host as SNI and reads which
// stand-in API server answered `GET /version`. Every case starts from no cluster and registers what it needs.
const STATIC = { KUBEBYON_STATIC_NODE_ADDRESSES: '127.0.0.1' };

describe(`end to end, static topology, HAProxy ${haproxyVersionUnderTest()}`, () => {
  let e: E2eHaproxy;
  let service: ServiceProcess;
  const servers: Record<string, VersionServer> = {};
  const endpoint = (host: string) => `https://${host}:${e.sniPort}`;
  const cluster = (host: string, nodePort: number) => ({
    control_plane_host: host,
    public_access_mode: 'loadbalancer',
    node_port: nodePort,
  });
  const put = (name: string, body: object) =>
    service.client.request('PUT', `/v1/clusters/${name}?wait=true`, body);
  /** Registers `name` at the stand-in server `server` and checks that its host reaches it. */
  const registered = async (name: string, server: string) => {
    const host = `api.${name}.example.com`;
    expect((await put(name, cluster(host, servers[server]?.port ?? 0))).status).toBe(200);
    expect(await waitForIdentity(endpoint(host), server)).toEqual({ identity: server, status: 200 });
  };

  beforeAll(async () => {
    for (const name of ['alpha', 'alpha-moved', 'beta', 'gamma'])
      servers[name] = await startVersionServer(name);
    e = await startE2eHaproxy();
    service = await e.startService(STATIC);
  });
  afterAll(async () => {
    await service?.stop();
    await e?.stop();
    await Promise.all(Object.values(servers).map((s) => s.close()));
  });
  beforeEach(async () => {
    // No cluster left by an earlier case: the full set, empty.
    expect((await service.client.request('PUT', '/v1/clusters?wait=true', { clusters: [] })).status).toBe(
      200,
    );
  });
  afterEach(async () => {
    // The operator's own frontend keeps serving, and its file is byte for byte what it was, after every case.
    expect(await e.operatorServes()).toBe(true);
    expect(e.operatorFileHash()).toBe(e.initialOperatorFileHash);
  });

  it('routes a signed PUT to that cluster’s API server and reports it applied', async () => {
    const res = await put('alpha', cluster('api.alpha.example.com', servers.alpha?.port ?? 0));
    expect(res.status).toBe(200);
    const status = await service.client.request('GET', '/v1/clusters/alpha');
    expect(status.body).toMatchObject({
      state: 'applied',
      api_endpoint: `https://api.alpha.example.com:${e.sniPort}`,
    });
    expect(await getVersion(status.body.api_endpoint)).toEqual({ identity: 'alpha', status: 200 });
    expect(servers.alpha?.seenServernames).toContain('api.alpha.example.com');
  });

  it('matches hosts case-insensitively, in the call and in the handshake', async () => {
    expect((await put('beta', cluster('API.Beta.Example.COM', servers.beta?.port ?? 0))).status).toBe(200);
    expect(await getVersion(endpoint('api.beta.example.com'))).toEqual({ identity: 'beta', status: 200 });
    expect(
      await getVersion(endpoint('api.beta.example.com'), { servername: 'Api.BETA.example.com' }),
    ).toEqual({ identity: 'beta', status: 200 });
  });

  it('closes a handshake whose SNI names no cluster', async () => {
    // A cluster, so that the SNI frontend exists and does answer the hosts it knows.
    await registered('alpha', 'alpha');
    expect(await getVersion(endpoint('nobody.example.com'))).toHaveProperty('failed');
  });

  it('refuses an IP-literal host with 422 host_is_ip_literal, and nothing reaches HAProxy', async () => {
    const before = readFileSync(e.haproxy.owned?.path ?? '', 'utf8');
    const loads = await e.loads();
    const res = await put('ip', cluster('127.0.0.1', servers.gamma?.port ?? 0));
    expect(res.status).toBe(422);
    expect(res.body).toMatchObject({ field: 'control_plane_host', reason: 'host_is_ip_literal' });
    expect((await service.client.request('GET', '/v1/clusters/ip')).status).toBe(404);
    await service.client.request('POST', '/v1/reconcile?wait=true');
    expect(readFileSync(e.haproxy.owned?.path ?? '', 'utf8')).toBe(before);
    expect(await e.loads()).toBe(loads);
  });

  it('moves traffic when an endpoint changes, without reloading HAProxy', async () => {
    await registered('alpha', 'alpha');
    const loads = await e.loads();
    const started = Date.now();
    expect(
      (await put('alpha', cluster('api.alpha.example.com', servers['alpha-moved']?.port ?? 0))).status,
    ).toBe(200);
    expect(await waitForIdentity(endpoint('api.alpha.example.com'), 'alpha-moved')).toEqual({
      identity: 'alpha-moved',
      status: 200,
    });
    const ms = Date.now() - started;
    expect((await e.loads()) - loads).toBe(0);
    console.log(
      `[measure] endpoint move: ${(await e.loads()) - loads} reloads, webhook to routable ${ms} ms`,
    );
  });

  it('removes what a full-set PUT leaves out, and a DELETE closes that host', async () => {
    await registered('beta', 'beta');
    const res = await service.client.request('PUT', '/v1/clusters?wait=true', {
      clusters: [
        { name: 'alpha', ...cluster('api.alpha.example.com', servers['alpha-moved']?.port ?? 0) },
        { name: 'gamma', ...cluster('api.gamma.example.com', servers.gamma?.port ?? 0) },
      ],
    });
    expect(res.status).toBe(200);
    expect(await getVersion(endpoint('api.gamma.example.com'))).toEqual({ identity: 'gamma', status: 200 });
    expect(await getVersion(endpoint('api.beta.example.com'))).toHaveProperty('failed');
    expect((await service.client.request('GET', '/v1/clusters/beta')).status).toBe(404);

    expect((await service.client.request('DELETE', '/v1/clusters/gamma?wait=true')).status).toBe(200);
    expect(await getVersion(endpoint('api.gamma.example.com'))).toHaveProperty('failed');
    expect(await getVersion(endpoint('api.alpha.example.com'))).toEqual({
      identity: 'alpha-moved',
      status: 200,
    });
  });

  it('sends unknown SNI to KUBEBYON_HAPROXY_DEFAULT_BACKEND, a backend of the operator’s file', async () => {
    await registered('alpha', 'alpha-moved');
    expect(await service.stop()).toBe(0);
    try {
      service = await e.startService({ ...STATIC, KUBEBYON_HAPROXY_DEFAULT_BACKEND: 'console' });
      expect(await waitForIdentity(endpoint('nobody.example.com'), 'console')).toEqual({
        identity: 'console',
        status: 200,
      });
      // The restarted service converged from its stored state: the routes it had are still there.
      expect(await getVersion(endpoint('api.alpha.example.com'))).toEqual({
        identity: 'alpha-moved',
        status: 200,
      });
    } finally {
      // Back to the service every case starts with.
      await service.stop();
      service = await e.startService(STATIC);
    }
  });
});
