import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, afterEach, beforeAll, describe, expect, it, onTestFailed } from 'vitest';
import {
  type DataplaneTestbed,
  DPAPI_USER,
  foreignConfig,
  startDataplaneTestbed,
} from '../support/dataplaneapi-testbed.js';
import { freeLoopbackPort } from '../support/ports.js';
import { type ServiceProcess, startServiceProcess } from '../support/service-process.js';
import {
  getVersion,
  startVersionServer,
  type VersionServer,
  waitForIdentity,
} from '../support/version-server.js';
import { waitFor } from '../support/wait.js';
import { source, versionUnderTest } from './harness.js';

// Several HAProxy instances, each behind its own Data Plane API, driven by one service with one loop each
// (test/e2e/instances.test.ts for stock HAProxy): every route is proven on every instance by a TLS handshake
// carrying SNI; one instance's container stopped for 30 s holds no other back, and catches up once back.
const run = promisify(execFile);
const docker = async (...args: string[]) => (await run('docker', args)).stdout;

interface ClusterView {
  state: string;
  reason: string | null;
  instances?: Array<{ name: string; state: string }>;
}
interface Bed {
  tb: DataplaneTestbed;
  sniPort: number;
}

describe.skipIf(!source)(`several Data Plane API instances, HAProxy ${versionUnderTest()}`, () => {
  const beds: Bed[] = [];
  const servers: Record<string, VersionServer> = {};
  // One set of credentials for every instance: the list gives each its URL only.
  const password = `pw-${randomBytes(8).toString('hex')}`;
  const secret = randomBytes(24).toString('hex');
  let dir: string;
  let service: ServiceProcess | undefined;
  let round = 0;

  const start = async (n: number) => {
    const stateDir = join(dir, `run-${round}`);
    service = await startServiceProcess(
      {
        KUBEBYON_PROVIDER: 'dataplaneapi',
        KUBEBYON_DATAPLANE_USERNAME: DPAPI_USER,
        KUBEBYON_DATAPLANE_PASSWORD: password,
        KUBEBYON_DATAPLANE_RELOAD_TIMEOUT_MS: '10000',
        KUBEBYON_HAPROXY_ROUTING: 'map',
        KUBEBYON_STATIC_NODE_ADDRESSES: '127.0.0.1',
        KUBEBYON_STATE_FILE: join(stateDir, 'clusters.json'),
        KUBEBYON_PUBLIC_PORT: String((beds[0] as Bed).sniPort),
        KUBEBYON_RECONCILE_DEBOUNCE_MS: '20',
        KUBEBYON_RECONCILE_MAX_DELAY_MS: '200',
        KUBEBYON_LOG_LEVEL: 'info',
        KUBEBYON_HAPROXY_INSTANCES: JSON.stringify(
          beds
            .slice(0, n)
            .map((bed, i) => ({ name: `h${i}`, url: bed.tb.url, bind: `127.0.0.1:${bed.sniPort}` })),
        ),
      },
      secret,
      { until: 'readyz', startTimeoutMs: 60_000 },
    );
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
  // By name: the list follows the order the instances' loops were made in, which is not the listed one.
  const states = (v: ClusterView) =>
    Object.fromEntries((v.instances ?? []).map((i) => [i.name, i.state] as const));
  const view = async (name: string) =>
    (await (service as ServiceProcess).client.request('GET', `/v1/clusters/${name}`)).body as ClusterView;
  const reaches = (bed: Bed, host: string, who: string, timeoutMs = 10_000) =>
    waitForIdentity(`https://${host}:${bed.sniPort}`, who, { timeoutMs });
  const answers = (bed: Bed) =>
    bed.tb.api.get('/services/haproxy/configuration/version', { timeout: 1_000 }).then(
      (res) => res.status === 200,
      () => false,
    );

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'kubebyon-dpapi-instances-'));
    for (const name of ['alpha', 'beta']) servers[name] = await startVersionServer(name);
    for (let i = 0; i < 3; i++) {
      const config = foreignConfig({ consolePort: await freeLoopbackPort(), consoleBackendPort: 9 });
      const tb = await startDataplaneTestbed(
        source as NonNullable<typeof source>,
        versionUnderTest(),
        config,
        {
          password,
        },
      );
      beds.push({ tb, sniPort: await freeLoopbackPort() });
    }
  }, 180_000);
  afterEach(async () => {
    await service?.stop();
    service = undefined;
  });
  afterAll(async () => {
    await Promise.all(beds.map((b) => b.tb.stop()));
    await Promise.all(Object.values(servers).map((s) => s.close()));
    if (dir) rmSync(dir, { recursive: true, force: true });
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
      // A move.
      expect((await put('c3', 'api.c3.example.com', 'beta')).status).toBe(200);
      for (const bed of beds.slice(0, n)) {
        expect(await reaches(bed, 'api.c1.example.com', 'alpha')).toEqual({ identity: 'alpha', status: 200 });
        expect(await reaches(bed, 'api.c2.example.com', 'beta')).toEqual({ identity: 'beta', status: 200 });
        expect(await reaches(bed, 'api.c3.example.com', 'beta')).toEqual({ identity: 'beta', status: 200 });
      }
      // An instance the service was not given routes nothing.
      if (n === 2)
        expect(await getVersion(`https://api.c1.example.com:${(beds[2] as Bed).sniPort}`)).toHaveProperty(
          'failed',
        );
      for (const name of ['c1', 'c2', 'c3']) {
        const c = await view(name);
        expect(c.state).toBe('applied');
        expect(states(c)).toEqual(Object.fromEntries(beds.slice(0, n).map((_, i) => [`h${i}`, 'applied'])));
      }
      expect(
        (await service?.client.request('DELETE', `/v1/clusters/c2?wait=true&n=${calls++}`))?.status,
      ).toBe(200);
      for (const bed of beds.slice(0, n)) {
        await waitForIdentity(`https://api.c2.example.com:${bed.sniPort}`, null);
        // The others stay.
        expect(await reaches(bed, 'api.c1.example.com', 'alpha')).toEqual({ identity: 'alpha', status: 200 });
      }
    });
  }

  it('keeps two instances converging while the third is stopped 30 s; it catches up within 2 s of answering again', async () => {
    await start(3);
    // What the service logged says why an instance was behind.
    onTestFailed(() => console.log((service as ServiceProcess).output().slice(-20_000)));
    const [h0, h1, h2] = beds as [Bed, Bed, Bed];
    expect((await put('base', 'api.base.example.com', 'alpha')).status).toBe(200);
    for (const bed of beds) await reaches(bed, 'api.base.example.com', 'alpha');
    // Past KUBEBYON_PERSIST_DELAY_MS (500 ms, at most 1 s after the first change): in HAProxy's files too.
    await new Promise((r) => setTimeout(r, 1_500));
    await docker('stop', '-t', '0', h2.tb.containerId);
    const stoppedAt = Date.now();
    const added: Array<[string, string]> = [['api.base.example.com', 'alpha']];
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
      const each = states(status);
      expect(each, JSON.stringify(status)).toMatchObject({ h0: 'applied', h1: 'applied' });
      expect(each.h2, JSON.stringify(status)).toBeDefined();
      expect(each.h2).not.toBe('applied');
      expect(status.state).not.toBe('applied');
      expect(status.reason).toMatch(/^h2: /);
      await new Promise((r) => setTimeout(r, 1_000));
    }
    expect(added.length).toBeGreaterThanOrEqual(11);
    const away = Date.now() - stoppedAt;

    // HAProxy is the container's entrypoint; its API is started beside it once HAProxy runs, as a
    // supervisor would (the test bed's `restart()`, split around the time away).
    await docker('start', h2.tb.containerId);
    await waitFor(
      () => h2.tb.masterCli('show proc').then((out) => out.includes('worker')),
      30_000,
      'HAProxy h2 to run again',
      { everyMs: 20 },
    );
    const haproxyAt = Date.now();
    // What h2's HAProxy kept from its files alone (a route applied at runtime is written to them later).
    const kept = await getVersion(`https://api.base.example.com:${h2.sniPort}`);
    expect(kept).toEqual({ identity: 'alpha', status: 200 });
    const polled = waitFor(() => answers(h2), 60_000, 'the Data Plane API of h2 to answer', { everyMs: 20 });
    await h2.tb.startApi();
    await polled;
    const backAt = Date.now();
    const apiStartMs = backAt - haproxyAt;
    const lagOf: number[] = [];
    for (const [host, who] of added) {
      expect(await reaches(h2, host, who, 10_000)).toEqual({ identity: who, status: 200 });
      lagOf.push(Date.now() - backAt);
    }
    const caughtUpMs = Date.now() - backAt;
    const sorted = [...lags].sort((a, b) => a - b);
    console.log(
      `dataplaneapi instances: ${added.length - 1} changes in ${away} ms while h2 was stopped; routable on ` +
        `h0+h1 p50 ${sorted[Math.floor(sorted.length / 2)]} ms, max ${Math.max(...lags)} ms; h2's API answered ` +
        `${apiStartMs} ms after its HAProxy ran; every route on h2 ${caughtUpMs} ms after its API answered ` +
        `(first ${lagOf[0]} ms)`,
    );
    expect(caughtUpMs).toBeLessThanOrEqual(2_000);
    await waitFor(
      async () => {
        const all = await Promise.all(['base', ...added.slice(1).map((_, i) => `k${i}`)].map(view));
        return all.every((v) => v.state === 'applied' && v.instances?.every((x) => x.state === 'applied'));
      },
      10_000,
      'every status applied on every instance',
    );
  }, 180_000);
});
