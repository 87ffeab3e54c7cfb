import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { haproxyVersionUnderTest } from '../support/haproxy-testbed.js';
import type { ServiceProcess } from '../support/service-process.js';
import {
  getVersion,
  startVersionServer,
  type VersionServer,
  waitForIdentity,
} from '../support/version-server.js';
import { waitFor } from '../support/wait.js';
import { type E2eHaproxy, startE2eHaproxy } from './fixture.js';

// Several stock HAProxy instances driven by one service, each with its own loop: every route is proven on
// every instance by a TLS handshake carrying SNI; one instance taken away for 30 s holds no other back, and
// catches up once it is back.
const run = promisify(execFile);
const docker = async (...args: string[]) => (await run('docker', args)).stdout;
const MAP = { KUBEBYON_STATIC_NODE_ADDRESSES: '127.0.0.1', KUBEBYON_HAPROXY_ROUTING: 'map' };

interface ClusterView {
  state: string;
  reason: string | null;
  instances?: Array<{ name: string; state: string }>;
}

describe(`end to end, several HAProxy instances, HAProxy ${haproxyVersionUnderTest()}`, () => {
  const beds: E2eHaproxy[] = [];
  const servers: Record<string, VersionServer> = {};
  let service: ServiceProcess | undefined;
  let round = 0;

  // Each instance: its own master socket, owned file, `haproxy -c` and port (they share this host).
  const instancesEnv = (n: number) => ({
    ...MAP,
    KUBEBYON_HAPROXY_INSTANCES: JSON.stringify(
      beds.slice(0, n).map((bed, i) => {
        const owned = bed.haproxy.owned;
        if (!owned) throw new Error('no owned file');
        return {
          name: `h${i}`,
          masterSocket: owned.masterSocket,
          ownedFile: owned.path,
          checkFiles: owned.checkFiles,
          haproxyBin: owned.checkBin,
          bind: `127.0.0.1:${bed.sniPort}`,
        };
      }),
    ),
  });
  const start = async (n: number) => {
    const first = beds[0] as E2eHaproxy;
    service = await first.startService(instancesEnv(n));
    const res = await service.client.request('PUT', `/v1/clusters?wait=true&round=${round++}`, {
      clusters: [],
    });
    expect(res.status).toBe(200);
    return service;
  };
  // A distinct query each time: the same signed request twice within a second is a replay (401).
  let calls = 0;
  const put = (name: string, host: string, server: string, wait = true) =>
    (service as ServiceProcess).client.request('PUT', `/v1/clusters/${name}?wait=${wait}&n=${calls++}`, {
      control_plane_host: host,
      public_access_mode: 'loadbalancer',
      node_port: servers[server]?.port ?? 0,
    });
  const view = async (name: string) =>
    (await (service as ServiceProcess).client.request('GET', `/v1/clusters/${name}`)).body as ClusterView;
  const reaches = (bed: E2eHaproxy, host: string, who: string, timeoutMs = 10_000) =>
    waitForIdentity(`https://${host}:${bed.sniPort}`, who, { timeoutMs });

  beforeAll(async () => {
    for (const name of ['alpha', 'beta']) servers[name] = await startVersionServer(name);
    for (let i = 0; i < 3; i++) beds.push(await startE2eHaproxy());
  }, 120_000);
  afterEach(async () => {
    await service?.stop();
    service = undefined;
  });
  afterAll(async () => {
    await Promise.all(beds.map((b) => b.stop()));
    await Promise.all(Object.values(servers).map((s) => s.close()));
  });

  for (const n of [2, 3]) {
    it(`converges ${n} instances to the same routes, each proven by SNI`, async () => {
      await start(n);
      const routes = [
        ['c1', 'api.c1.example.com', 'alpha'],
        ['c2', 'api.c2.example.com', 'beta'],
        ['c3', 'api.c3.example.com', 'alpha'],
      ] as const;
      for (const [name, host, who] of routes) expect((await put(name, host, who)).status).toBe(200);
      expect((await put('c3', 'api.c3.example.com', 'beta')).status).toBe(200);
      for (const bed of beds.slice(0, n)) {
        expect(await reaches(bed, 'api.c1.example.com', 'alpha')).toEqual({ identity: 'alpha', status: 200 });
        expect(await reaches(bed, 'api.c2.example.com', 'beta')).toEqual({ identity: 'beta', status: 200 });
        expect(await reaches(bed, 'api.c3.example.com', 'beta')).toEqual({ identity: 'beta', status: 200 });
      }
      // An instance the service was not given routes nothing.
      if (n === 2)
        expect(
          await getVersion(`https://api.c1.example.com:${(beds[2] as E2eHaproxy).sniPort}`),
        ).toHaveProperty('failed');
      const c1 = await view('c1');
      expect(c1.state).toBe('applied');
      expect(c1.instances?.map((i) => [i.name, i.state])).toEqual(
        Array.from({ length: n }, (_, i) => [`h${i}`, 'applied']),
      );
      // Metrics name the instance.
      const metrics = await (await fetch(`${service?.url}/metrics`)).text();
      for (let i = 0; i < n; i++)
        expect(metrics).toMatch(
          new RegExp(
            `^kubebyon_haproxy_adapter_reconciles_total\\{result="changed",haproxy="h${i}"\\} [1-9]`,
            'm',
          ),
        );
      expect((await put('c2', 'api.c2.example.com', 'beta')).status).toBe(200);
      expect(
        (await service?.client.request('DELETE', `/v1/clusters/c2?wait=true&n=${calls++}`))?.status,
      ).toBe(200);
      for (const bed of beds.slice(0, n))
        await waitForIdentity(`https://api.c2.example.com:${bed.sniPort}`, null);
    });
  }

  it('keeps two instances converging while the third is away 30 s; it catches up within 2 s of coming back', async () => {
    await start(3);
    const [h0, h1, h2] = beds as [E2eHaproxy, E2eHaproxy, E2eHaproxy];
    expect((await put('base', 'api.base.example.com', 'alpha')).status).toBe(200);
    for (const bed of beds) await reaches(bed, 'api.base.example.com', 'alpha');
    await docker('stop', '-t', '0', h2.haproxy.containerId);
    const stoppedAt = Date.now();
    const added: Array<[string, string]> = [];
    const lags: number[] = [];
    // Changes keep coming for 30 s: each is routable on the two instances that run, within seconds.
    for (let i = 0; Date.now() - stoppedAt < 30_000 && i < 60; i++) {
      const host = `api.k${i}.example.com`;
      const who = i % 2 === 0 ? 'alpha' : 'beta';
      const sent = Date.now();
      // Acknowledged once stored; a caller waiting for every instance would wait on the one away.
      expect((await put(`k${i}`, host, who, false)).status).toBe(202);
      for (const bed of [h0, h1])
        expect(await reaches(bed, host, who, 5_000)).toEqual({ identity: who, status: 200 });
      lags.push(Date.now() - sent);
      added.push([host, who]);
      const status = await view(`k${i}`);
      expect(status.instances?.map((x) => x.state).slice(0, 2)).toEqual(['applied', 'applied']);
      expect(status.instances?.[2]?.state).not.toBe('applied');
      expect(status.state).not.toBe('applied');
      expect(status.reason).toMatch(/^h2: /);
      await new Promise((r) => setTimeout(r, 1_000));
    }
    expect(added.length).toBeGreaterThanOrEqual(10);
    await docker('start', h2.haproxy.containerId);
    await waitFor(
      () =>
        h2.haproxy.masterCli('show proc').then(
          () => true,
          () => false,
        ),
      30_000,
      'HAProxy h2 back',
      { everyMs: 20 },
    );
    const backAt = Date.now();
    for (const [host, who] of added)
      expect(await reaches(h2, host, who, 10_000)).toEqual({ identity: who, status: 200 });
    const caughtUpMs = Date.now() - backAt;
    console.log(
      `instances: ${added.length} changes while h2 was away; routable on h0+h1 p50 ${lags.sort((a, b) => a - b)[Math.floor(lags.length / 2)]} ms, max ${Math.max(...lags)} ms; h2 caught up ${caughtUpMs} ms after it answered again`,
    );
    expect(caughtUpMs).toBeLessThanOrEqual(2_000);
    await waitFor(
      async () => (await view(`k${added.length - 1}`)).state === 'applied',
      10_000,
      'status applied everywhere',
    );
  }, 120_000);
});
