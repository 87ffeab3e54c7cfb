import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { haproxyVersionUnderTest } from '../support/haproxy-testbed.js';
import { type ServiceProcess, startServiceProcess } from '../support/service-process.js';
import { type NamedTlsServer, sniProbe, startNamedTlsServer } from '../support/tls.js';
import { waitFor } from '../support/wait.js';
import {
  describeFault,
  docker,
  type FaultBed,
  faultProviderUnderTest,
  readyz,
  startFaultBed,
} from './harness.js';

const OUTAGE_MS = 30_000;
const provider = faultProviderUnderTest();
/** What goes away: the master socket (stock provider), or the Data Plane API's process. */
const away = provider === 'haproxy' ? 'master socket' : 'Data Plane API';

// HAProxy away mid-stream: what the service drives unreachable for 30 s (the stock provider's master socket,
// or the Data Plane API, killed), then the whole container restarted. Readiness must say so, writes must
// still be acknowledged and stored, and once HAProxy is back the service must converge on its own (no call,
// no restart) to everything it acknowledged.
describeFault(
  'provider',
  `HAProxy unreachable or restarted, HAProxy ${haproxyVersionUnderTest()}, ${provider} provider`,
  () => {
    let bed: FaultBed;
    let service: ServiceProcess;
    const servers: Record<string, NamedTlsServer> = {};
    /** host -> the stand-in API server it must reach. */
    const want = new Map<string, string>();
    let n = 0;

    const put = async (name: string, server: string) => {
      const res = await service.client.request('PUT', `/v1/clusters/${name}?n=${n++}`, {
        control_plane_host: `${name}.example.com`,
        public_access_mode: 'loadbalancer',
        node_port: servers[server]?.port,
      });
      expect(res.status).toBe(202);
      want.set(`${name}.example.com`, server);
    };
    const converged = async (timeoutMs: number) =>
      waitFor(
        async () => {
          const listed = await service.client.request('GET', '/v1/clusters');
          const states = (listed.body.clusters as Array<{ state: string }>).map((c) => c.state);
          const routes = await bed.routes();
          return { states, hosts: [...routes.keys()].sort() };
        },
        timeoutMs,
        'HAProxy to run every acknowledged route',
        {
          ok: (r) =>
            r.states.every((s) => s === 'applied') && r.hosts.join() === [...want.keys()].sort().join(),
          everyMs: 500,
        },
      );
    /**
     * No transaction open and no ledger: the provider opens none (the stock provider has none at all). The API
     * opens one for each push of the file, and a kill of the API mid-push leaves it open: the provider sweeps
     * it after its next write moves the configuration past it, within seconds of converging.
     */
    const noStrayTransactions = async () => {
      const open = await waitFor(() => bed.openTransactions(), 15_000, 'no transaction open', {
        ok: (ids) => ids.length === 0,
        everyMs: 250,
      }).catch(async () => bed.openTransactions());
      expect({ open, ledger: bed.ledger() }).toEqual({ open: [], ledger: [] });
      return provider === 'haproxy' ? '' : ', no transaction open';
    };
    const probesReach = async () => {
      for (const [host, server] of want)
        expect({ host, probe: await sniProbe(bed.sniPort, host) }).toEqual({
          host,
          probe: { reached: server },
        });
    };

    beforeAll(async () => {
      for (const name of ['a', 'b', 'c']) servers[name] = await startNamedTlsServer(name);
      bed = await startFaultBed({ provider });
      service = await startServiceProcess(bed.env(), bed.secret);
    });
    afterAll(async () => {
      await service?.stop();
      await bed?.stop();
      await Promise.all(Object.values(servers).map((s) => s.close()));
    });

    it(`${away} unreachable for 30 s: not ready, writes acknowledged and stored, converges by itself after`, async () => {
      await put('one', 'a');
      expect((await service.client.request('POST', '/v1/reconcile?wait=true')).status).toBe(200);
      await converged(30_000);
      expect(await sniProbe(bed.sniPort, 'one.example.com')).toEqual({ reached: 'a' });

      await bed.cut();
      const down = Date.now();
      try {
        await waitFor(() => readyz(service.url), 20_000, 'readiness to report HAProxy unreachable', {
          ok: (r) => r.status === 503 && r.body.checks.haproxy?.ok === false,
        });
        // Changes while HAProxy is away: acknowledged, since they are stored.
        let writes = 0;
        for (let i = 0; i < 6; i++) {
          await put(`new${i}`, i % 2 ? 'b' : 'c');
          writes++;
        }
        await put('one', 'b');
        writes++;
        let notReady = 0;
        let samples = 0;
        while (Date.now() - down < OUTAGE_MS) {
          const r = await readyz(service.url);
          samples++;
          if (r.status === 503) notReady++;
          // HAProxy itself keeps serving what it last loaded.
          expect(await sniProbe(bed.sniPort, 'one.example.com')).toEqual({ reached: 'a' });
          await sleep(2_000);
        }
        // Stored: listed while HAProxy is still away.
        const listed = await service.client.request('GET', '/v1/clusters');
        expect((listed.body.clusters as Array<{ name: string }>).map((c) => c.name).sort()).toEqual(
          ['new0', 'new1', 'new2', 'new3', 'new4', 'new5', 'one'].sort(),
        );
        expect(notReady).toBe(samples);
        console.log(
          `[measure] ${away} unreachable ${Math.round((Date.now() - down) / 1000)} s: ${writes} writes acknowledged, not ready in ${notReady}/${samples} samples`,
        );
      } finally {
        await bed.restore();
      }
      const back = Date.now();
      await converged(60_000);
      await waitFor(() => readyz(service.url), 30_000, 'readiness once HAProxy is back', {
        ok: (r) => r.status === 200,
      });
      console.log(
        `[measure] converged ${((Date.now() - back) / 1000).toFixed(1)} s after the ${away} came back${await noStrayTransactions()}`,
      );
      await probesReach();
    });

    it('HAProxy container restarted mid-stream: writes acknowledged throughout, converges by itself after', async () => {
      const id = await bed.containerId();
      const startedAt = async () => (await docker('inspect', '-f', '{{.State.StartedAt}}', id)).trim();
      const before = await startedAt();
      // With the Data Plane API, which dies with the container, the API is started again as a supervisor would.
      const restart = (async () => {
        await sleep(1_500);
        await bed.restart();
      })();
      const started = Date.now();
      let i = 0;
      // Changes keep coming, before, during and after the restart.
      while (Date.now() - started < 12_000) {
        await put(`r${i % 5}`, ['a', 'b', 'c'][i % 3] as string);
        i++;
        await sleep(400);
      }
      await restart;
      expect(await startedAt()).not.toBe(before);
      const restarted = Date.now();
      await converged(60_000);
      await waitFor(() => readyz(service.url), 30_000, 'readiness after the restart', {
        ok: (r) => r.status === 200,
      });
      console.log(
        `[measure] HAProxy restart (${provider}): ${i} writes acknowledged during it, converged ${((Date.now() - restarted) / 1000).toFixed(1)} s after${await noStrayTransactions()}`,
      );
      await probesReach();
      if (process.env.KUBEBYON_FAULT_DEBUG)
        console.log(
          service
            .output()
            .split('\n')
            .filter((l) => /failed|error|warn/i.test(l))
            .slice(-40)
            .join('\n'),
        );
    });
  },
);
