import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { haproxyVersionUnderTest } from '../support/haproxy-testbed.js';
import type { ServiceProcess } from '../support/service-process.js';
import {
  getVersion,
  startVersionServer,
  type VersionServer,
  waitForIdentity,
} from '../support/version-server.js';
import { type E2eHaproxy, startE2eHaproxy } from './fixture.js';

// How long a webhook takes to become routable with 10 and 1000 clusters in HAProxy, and what an endpoint move
// costs there. Prints `[measure]` lines; the bounds asserted are generous (two shared cores), the numbers are
// the point. One stand-in server answers for every cluster with the SNI it saw, so routing stays checkable;
// health checks are off so that 1000 servers do not probe it.
const version = haproxyVersionUnderTest();

describe(`end to end at scale, static topology, HAProxy ${version}`, () => {
  let e: E2eHaproxy;
  let svc: ServiceProcess;
  let home: VersionServer;
  let moved: VersionServer;
  const url = (host: string) => `https://${host}:${e.sniPort}`;
  const host = (i: number) => `c${i}.scale.example.com`;
  const body = (i: number, port = home.port) => ({
    control_plane_host: host(i),
    public_access_mode: 'loadbalancer',
    node_port: port,
  });

  beforeAll(async () => {
    home = await startVersionServer((sni) => sni);
    moved = await startVersionServer((sni) => `moved:${sni}`);
    e = await startE2eHaproxy();
    svc = await e.startService({
      KUBEBYON_STATIC_NODE_ADDRESSES: '127.0.0.1',
      KUBEBYON_HAPROXY_HEALTH_CHECKS: 'false',
      KUBEBYON_LOG_LEVEL: 'warn',
      KUBEBYON_WEBHOOK_BODY_LIMIT_BYTES: String(4 * 1024 * 1024),
    });
  });
  afterAll(async () => {
    await svc?.stop();
    await e?.stop();
    await home?.close();
    await moved?.close();
  });

  for (const n of [10, 1000]) {
    it(`routes a webhook within seconds with ${n} clusters`, async () => {
      let loads = await e.loads();
      let t = Date.now();
      const full = await svc.client.request('PUT', '/v1/clusters?wait=true', {
        clusters: Array.from({ length: n }, (_, i) => ({ name: `c${i}`, ...body(i) })),
      });
      expect(full.status).toBe(200);
      expect(await waitForIdentity(url(host(n - 1)), host(n - 1))).toEqual({
        identity: host(n - 1),
        status: 200,
      });
      const fullMs = Date.now() - t;
      const fullReloads = (await e.loads()) - loads;
      for (let k = 0; k < 10; k++) {
        const i = Math.floor((k * n) / 10);
        expect(await getVersion(url(host(i)))).toEqual({ identity: host(i), status: 200 });
      }

      loads = await e.loads();
      t = Date.now();
      expect((await svc.client.request('PUT', `/v1/clusters/c${n}`, body(n))).status).toBe(202);
      expect(await waitForIdentity(url(host(n)), host(n), { timeoutMs: 60_000 })).toEqual({
        identity: host(n),
        status: 200,
      });
      const addMs = Date.now() - t;
      const addReloads = (await e.loads()) - loads;

      loads = await e.loads();
      t = Date.now();
      expect((await svc.client.request('PUT', '/v1/clusters/c0', body(0, moved.port))).status).toBe(202);
      expect(await waitForIdentity(url(host(0)), `moved:${host(0)}`, { timeoutMs: 60_000 })).toEqual({
        identity: `moved:${host(0)}`,
        status: 200,
      });
      const moveMs = Date.now() - t;
      const moveReloads = (await e.loads()) - loads;

      console.log(
        `[measure] HAProxy ${version}, N=${n}: full set ${fullMs} ms (${fullReloads} reload); ` +
          `one more cluster: webhook to routable ${addMs} ms (${addReloads} reloads); ` +
          `endpoint move: webhook to routable ${moveMs} ms (${moveReloads} reloads)`,
      );
      expect(moveReloads).toBe(0);
      // Map routing: the new cluster takes a free slot at runtime (the pool was grown ahead by the full set).
      expect(addReloads).toBe(0);
      expect(addMs).toBeLessThan(30_000);
      expect(await e.operatorServes()).toBe(true);
    }, 180_000);
  }
});
