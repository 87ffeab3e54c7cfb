import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { haproxyVersionUnderTest } from '../support/haproxy-testbed.js';
import { freeLoopbackPort } from '../support/ports.js';
import type { ServiceProcess } from '../support/service-process.js';
import { getVersion, startVersionServer, type VersionServer } from '../support/version-server.js';
import { waitFor } from '../support/wait.js';
import { type E2eHaproxy, startE2eHaproxy } from './fixture.js';

// Two adapters on one HAProxy, as a staging and a production KubeBYON behind one public IP: each with its own
// owner id, frontend, backend prefix, bind port and owned file. Before owner ids, each deleted the other's
// routes on every pass; now each owns only what carries its id, and neither plan names the other's objects.
describe(`two owners on one HAProxy ${haproxyVersionUnderTest()}`, () => {
  let e: E2eHaproxy;
  let production: ServiceProcess;
  let staging: ServiceProcess;
  let stagingPort: number;
  const servers: Record<string, VersionServer> = {};
  const cluster = (host: string, nodePort: number) => ({
    control_plane_host: host,
    public_access_mode: 'loadbalancer',
    node_port: nodePort,
  });
  const resync = {
    KUBEBYON_STATIC_NODE_ADDRESSES: '127.0.0.1',
    // A resync every 300 ms: several within the test, each a full read, plan and (empty) apply.
    KUBEBYON_RESYNC_INTERVAL_MS: '300',
  };
  const resyncs = async (service: ServiceProcess) => {
    const text = await (await fetch(`${service.url}/metrics`)).text();
    const m = /kubebyon_haproxy_adapter_reconciles_total\{[^}]*\} (\d+)/g;
    let n = 0;
    for (const x of text.matchAll(m)) n += Number(x[1]);
    return n;
  };

  beforeAll(async () => {
    for (const name of ['prod', 'stg']) servers[name] = await startVersionServer(name);
    e = await startE2eHaproxy({ secondOwnedFile: true });
    const second = e.haproxy.second;
    if (!second) throw new Error('no second owned file');
    stagingPort = await freeLoopbackPort();
    production = await e.startService({ ...resync, KUBEBYON_OWNER_ID: 'production' });
    staging = await e.startService(
      {
        ...resync,
        KUBEBYON_OWNER_ID: 'staging',
        KUBEBYON_HAPROXY_FRONTEND_NAME: 'staging_sni',
        KUBEBYON_HAPROXY_NAME_PREFIX: 'stg_',
        KUBEBYON_HAPROXY_BIND_ADDR: `127.0.0.1:${stagingPort}`,
        KUBEBYON_PUBLIC_PORT: String(stagingPort),
      },
      second,
    );
  }, 120_000);
  afterAll(async () => {
    await production?.stop();
    await staging?.stop();
    await e?.stop();
    await Promise.all(Object.values(servers).map((s) => s.close()));
  });

  it('each registers a cluster; after several resyncs both still answer by SNI and neither touches the other', async () => {
    const p = await production.client.request(
      'PUT',
      '/v1/clusters/demo?wait=true',
      cluster('api.demo.prod.example.com', servers.prod?.port ?? 0),
    );
    expect(p.status).toBe(200);
    const s = await staging.client.request(
      'PUT',
      '/v1/clusters/demo?wait=true',
      cluster('api.demo.staging.example.com', servers.stg?.port ?? 0),
    );
    expect(s.status).toBe(200);
    expect(s.body).toMatchObject({ api_endpoint: `https://api.demo.staging.example.com:${stagingPort}` });

    // Map routing adds servers at runtime and writes them to the files soon after: wait for that write.
    const persisted = (path: string, port: number) =>
      waitFor(() => readFileSync(path, 'utf8'), 10_000, `servers written to ${path}`, {
        ok: (text) => text.includes(`:${port}`),
      });
    const prodFile = await persisted(e.haproxy.owned?.path ?? '', servers.prod?.port ?? 0);
    const stgFile = await persisted(e.haproxy.second?.path ?? '', servers.stg?.port ?? 0);
    expect(prodFile).toMatch(/owner=production/);
    expect(prodFile).not.toMatch(/owner=staging|stg_/);
    expect(stgFile).toMatch(/owner=staging/);
    expect(stgFile).not.toMatch(/owner=production|kubebyon_sni/);
    const loads = await e.loads();

    // Several resyncs of each adapter, each reading the whole HAProxy (the other's objects included).
    const [p0, s0] = [await resyncs(production), await resyncs(staging)];
    await waitFor(
      async () => (await resyncs(production)) >= p0 + 4 && (await resyncs(staging)) >= s0 + 4,
      30_000,
      'four resyncs of each adapter',
    );

    expect(await getVersion(`https://api.demo.prod.example.com:${e.sniPort}`)).toEqual({
      identity: 'prod',
      status: 200,
    });
    expect(await getVersion(`https://api.demo.staging.example.com:${stagingPort}`)).toEqual({
      identity: 'stg',
      status: 200,
    });
    // Each host answers on its own adapter's frontend only.
    expect(await getVersion(`https://api.demo.staging.example.com:${e.sniPort}`)).toHaveProperty('failed');
    // Nothing was written or reloaded by the resyncs, and each plan is empty: neither names the other's objects.
    expect(readFileSync(e.haproxy.owned?.path ?? '', 'utf8')).toBe(prodFile);
    expect(readFileSync(e.haproxy.second?.path ?? '', 'utf8')).toBe(stgFile);
    expect(await e.loads()).toBe(loads);
    for (const service of [production, staging]) {
      const plan = await service.client.request('GET', '/v1/plan');
      expect(plan.status).toBe(200);
      expect(plan.body).toMatchObject({ operations: [] });
    }
    expect(await e.operatorServes()).toBe(true);
  }, 90_000);
});
