import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { afterAll, afterEach, beforeAll, describe, expect, it, onTestFailed } from 'vitest';
import type { ServiceProcess } from './service-process.js';
import { getVersion, startVersionServer, type VersionServer, waitForIdentity } from './version-server.js';
import { waitFor } from './wait.js';

/**
 * The proof of several HAProxy instances, whatever drives them (stock HAProxy, or each its Data Plane API):
 * one service, three beds. Two and three instances converge to the same routes, each proven by a TLS
 * handshake carrying SNI on every instance; one instance taken away for 30 s while a change comes every
 * second holds no other back, and has every route once it answers again. How soon is printed, not asserted (a
 * test's outcome must not depend on the machine's speed): 0.8 s on a quiet machine, 2-3 s at load 20+.
 */

const run = promisify(execFile);
export const docker = async (...args: string[]) => (await run('docker', args)).stdout;

/** One HAProxy instance of the scenario: where its SNI frontend listens. */
export interface InstanceBed {
  sniPort: number;
}

export interface InstancesScenario<B extends InstanceBed> {
  title: string;
  /** Why it cannot run here (no Data Plane API given), or undefined. */
  skip?: string | undefined;
  /** Three beds. */
  startBeds(): Promise<B[]>;
  stopBeds(beds: B[]): Promise<void>;
  /** The service driving the first `n` beds as instances `h0`, `h1`, …, ready; `run` differs per call. */
  startService(beds: B[], n: number, run: number): Promise<ServiceProcess>;
  /** Takes the instance away (its container stopped). */
  takeAway(bed: B): Promise<void>;
  /** Brings it back; resolves once the service could reach it again (its master CLI or API answers). */
  bringBack(bed: B): Promise<void>;
}

interface ClusterView {
  state: string;
  reason: string | null;
  instances?: Array<{ name: string; state: string }>;
}

export function describeInstances<B extends InstanceBed>(s: InstancesScenario<B>): void {
  describe.skipIf(s.skip !== undefined)(s.title, () => {
    let beds: B[] = [];
    const servers: Record<string, VersionServer> = {};
    let service: ServiceProcess | undefined;
    let runs = 0;
    // A distinct query each time: the same signed request twice within a second is a replay (401).
    let calls = 0;

    const start = async (n: number) => {
      service = await s.startService(beds, n, runs++);
      const res = await service.client.request('PUT', `/v1/clusters?wait=true&n=${calls++}`, {
        clusters: [],
      });
      expect(res.status).toBe(200);
      // What the service logged says why an instance was behind.
      onTestFailed(() => console.log(service?.output().slice(-20_000)));
    };
    const put = (name: string, host: string, server: string, wait = true) =>
      (service as ServiceProcess).client.request('PUT', `/v1/clusters/${name}?wait=${wait}&n=${calls++}`, {
        control_plane_host: host,
        public_access_mode: 'loadbalancer',
        node_port: servers[server]?.port ?? 0,
      });
    const view = async (name: string) =>
      (await (service as ServiceProcess).client.request('GET', `/v1/clusters/${name}`)).body as ClusterView;
    const states = (v: ClusterView) => (v.instances ?? []).map((i) => `${i.name}:${i.state}`);
    const reaches = (bed: B, host: string, who: string, timeoutMs = 10_000) =>
      waitForIdentity(`https://${host}:${bed.sniPort}`, who, { timeoutMs });
    const served = (who: string) => ({ identity: who, status: 200 });

    beforeAll(async () => {
      for (const name of ['alpha', 'beta']) servers[name] = await startVersionServer(name);
      beds = await s.startBeds();
    }, 180_000);
    afterEach(async () => {
      await service?.stop();
      service = undefined;
    });
    afterAll(async () => {
      await s.stopBeds(beds);
      await Promise.all(Object.values(servers).map((v) => v.close()));
    });

    for (const n of [2, 3]) {
      it(`converges ${n} instances to the same routes, each proven by SNI`, async () => {
        await start(n);
        const driven = beds.slice(0, n);
        for (const [name, host, who] of [
          ['c1', 'api.c1.example.com', 'alpha'],
          ['c2', 'api.c2.example.com', 'beta'],
          ['c3', 'api.c3.example.com', 'alpha'],
          ['c3', 'api.c3.example.com', 'beta'],
        ] as const)
          expect((await put(name, host, who)).status).toBe(200);
        for (const bed of driven) {
          expect(await reaches(bed, 'api.c1.example.com', 'alpha')).toEqual(served('alpha'));
          expect(await reaches(bed, 'api.c2.example.com', 'beta')).toEqual(served('beta'));
          expect(await reaches(bed, 'api.c3.example.com', 'beta')).toEqual(served('beta'));
        }
        // An instance the service was not given routes nothing.
        if (n === 2)
          expect(await getVersion(`https://api.c1.example.com:${(beds[2] as B).sniPort}`)).toHaveProperty(
            'failed',
          );
        for (const name of ['c1', 'c2', 'c3']) {
          const c = await view(name);
          expect(c.state).toBe('applied');
          expect(states(c)).toEqual(driven.map((_, i) => `h${i}:applied`));
        }
        // Metrics name the instance.
        const metrics = await (await fetch(`${service?.url}/metrics`)).text();
        for (let i = 0; i < n; i++)
          expect(metrics).toMatch(
            new RegExp(
              `^kubebyon_haproxy_adapter_reconciles_total\\{result="changed",haproxy="h${i}"\\} [1-9]`,
              'm',
            ),
          );
        const deleted = await service?.client.request('DELETE', `/v1/clusters/c2?wait=true&n=${calls++}`);
        expect(deleted?.status).toBe(200);
        for (const bed of driven) {
          await waitForIdentity(`https://api.c2.example.com:${bed.sniPort}`, null);
          expect(await reaches(bed, 'api.c1.example.com', 'alpha')).toEqual(served('alpha'));
        }
      });
    }

    it('keeps two instances converging while the third is away 30 s; it catches up once it answers again', async () => {
      await start(3);
      const [h0, h1, h2] = beds as [B, B, B];
      expect((await put('base', 'api.base.example.com', 'alpha')).status).toBe(200);
      for (const bed of beds) await reaches(bed, 'api.base.example.com', 'alpha');
      // Past KUBEBYON_PERSIST_DELAY_MS (500 ms, at most 1 s after the first change): in HAProxy's files too.
      await new Promise((r) => setTimeout(r, 1_500));
      await s.takeAway(h2);
      const awayAt = Date.now();
      const added: Array<[string, string]> = [['api.base.example.com', 'alpha']];
      const lags: number[] = [];
      // Changes keep coming for 30 s: each is routable on the two instances that run, within seconds.
      for (let i = 0; Date.now() - awayAt < 30_000 && i < 60; i++) {
        const host = `api.k${i}.example.com`;
        const who = i % 2 === 0 ? 'alpha' : 'beta';
        const sent = Date.now();
        // Acknowledged once stored; a caller waiting for every instance would wait on the one away.
        expect((await put(`k${i}`, host, who, false)).status).toBe(202);
        for (const bed of [h0, h1]) expect(await reaches(bed, host, who, 5_000)).toEqual(served(who));
        lags.push(Date.now() - sent);
        added.push([host, who]);
        // Routable may come before the status says so: an apply that reloads (the Data Plane API on HAProxy
        // 2.6) is confirmed, and published, once the new workers run, which may be after they answer.
        let status = await view(`k${i}`);
        await waitFor(
          async () => {
            status = await view(`k${i}`);
            return states(status)[0] === 'h0:applied' && states(status)[1] === 'h1:applied';
          },
          10_000,
          `k${i} applied on h0 and h1`,
        ).catch(() => {});
        expect(states(status).slice(0, 2), JSON.stringify(status)).toEqual(['h0:applied', 'h1:applied']);
        expect(states(status)[2]).toMatch(/^h2:/);
        expect(states(status)[2]).not.toBe('h2:applied');
        expect(status.state).not.toBe('applied');
        expect(status.reason).toMatch(/^h2: /);
        await new Promise((r) => setTimeout(r, 1_000));
      }
      expect(added.length).toBeGreaterThanOrEqual(11);
      const awayMs = Date.now() - awayAt;
      await s.bringBack(h2);
      const backAt = Date.now();
      for (const [host, who] of added) expect(await reaches(h2, host, who, 10_000)).toEqual(served(who));
      const caughtUpMs = Date.now() - backAt;
      const sorted = [...lags].sort((a, b) => a - b);
      console.log(
        `${s.title}: ${added.length - 1} changes in ${awayMs} ms while h2 was away; routable on h0+h1 p50 ` +
          `${sorted[Math.floor(sorted.length / 2)]} ms, max ${Math.max(...lags)} ms; every route on h2 ` +
          `${caughtUpMs} ms after it answered again`,
      );
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
}
