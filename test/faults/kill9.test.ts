import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { haproxyVersionUnderTest } from '../support/haproxy-testbed.js';
import { type ServiceProcess, startServiceProcess } from '../support/service-process.js';
import { type NamedTlsServer, sniProbe, startNamedTlsServer } from '../support/tls.js';
import { waitFor } from '../support/wait.js';
import {
  describeFault,
  type FaultBed,
  faultProviderUnderTest,
  faultSeed,
  random,
  readyz,
  startFaultBed,
} from './harness.js';

const provider = faultProviderUnderTest();
const CHANGES = 200;
const CLUSTERS = 24;
const MAX_KILLS = 8;

/** What one cluster may look like: routed to a stand-in API server under a host, or absent. */
type ClusterState = { host: string; server: string } | null;

// kill -9 of the service at random moments while 200 changes stream in: after each restart HAProxy must
// converge to exactly what was acknowledged (202), and never hold a change nobody was told about, except a
// change that was in flight at the moment of the kill (received maybe, answered never). With the Data Plane
// API, no transaction may ever be open: the provider opens none (the API never expires one, and releases
// before this one left them behind when killed).
describeFault(
  'provider',
  `kill -9 during a stream of changes, HAProxy ${haproxyVersionUnderTest()}, ${provider} provider`,
  () => {
    let bed: FaultBed;
    let service: ServiceProcess | undefined;
    const servers: NamedTlsServer[] = [];

    beforeAll(async () => {
      for (const name of ['a', 'b', 'c', 'd']) servers.push(await startNamedTlsServer(name));
      bed = await startFaultBed({ provider });
    });
    afterAll(async () => {
      await service?.stop();
      await bed?.stop();
      await Promise.all(servers.map((s) => s.close()));
    });

    it('converges to exactly the acknowledged set after every kill', async () => {
      const seed = faultSeed();
      const rand = random(seed);
      const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)] as T;
      const env = bed.env();
      const names = Array.from({ length: CLUSTERS }, (_, i) => `c${String(i).padStart(2, '0')}`);
      // Per cluster: the last acknowledged state, and states sent since that may have landed unanswered.
      const acked = new Map<string, ClusterState>(names.map((n) => [n, null]));
      const maybe = new Map<string, ClusterState[]>(names.map((n) => [n, []]));
      let kills = 0;
      let inFlightAtKill = 0;
      let acknowledged = 0;
      let refusedWhileUp = 0;
      // Transactions open in the API right after each kill. The provider opens none, but the API carries out
      // each `POST /configuration/raw` in a transaction of its own (seen `in_progress` while the push runs),
      // and ends it whether or not the caller is still there (seen: closed 300 ms after the caller went). One
      // seen right after a kill must be gone at the end: none may be left open.
      const openAtKills = new Set<string>();

      service = await startServiceProcess(env, bed.secret);
      let current: ServiceProcess = service;
      let restarting: Promise<void> | undefined;
      let done = false;
      // The killer: at a random moment after each start, SIGKILL, then start again at once on the same state.
      const killer = (async () => {
        while (kills < MAX_KILLS) {
          await sleep(150 + rand() * 1800);
          if (done) return;
          kills++;
          restarting = (async () => {
            await current.kill9();
            for (const id of await bed.openTransactions()) openAtKills.add(id);
            current = await startServiceProcess(env, bed.secret);
            service = current;
          })();
          await restarting;
          restarting = undefined;
        }
      })();

      for (let i = 0; i < CHANGES; i++) {
        if (restarting) await restarting;
        const name = pick(names);
        const roll = rand();
        const next: ClusterState =
          roll < 0.2
            ? null
            : { host: `${name}${roll < 0.3 ? '-alt' : ''}.example.com`, server: pick(servers).name };
        const target = servers.find((s) => s.name === next?.server);
        const sentTo = current;
        // ?n=i: two equal changes within one second are distinct calls, not a replay.
        let status = 0;
        let lost = false;
        try {
          const res =
            next === null
              ? await sentTo.client.request('DELETE', `/v1/clusters/${name}?n=${i}`)
              : await sentTo.client.request('PUT', `/v1/clusters/${name}?n=${i}`, {
                  control_plane_host: next.host,
                  public_access_mode: 'loadbalancer',
                  node_port: target?.port,
                });
          status = res.status;
        } catch {
          // No answer: the process died under the call. It may have stored the change before.
          lost = true;
        }
        if (status === 202) {
          acked.set(name, next);
          maybe.set(name, []);
          acknowledged++;
        } else if (lost || sentTo.exited) {
          maybe.get(name)?.push(next);
          inFlightAtKill++;
        } else {
          refusedWhileUp++;
        }
        await sleep(40 + rand() * 60);
      }
      done = true;
      await killer;
      if (restarting) await restarting;
      const final = current;

      // Converged: ready, every cluster reconciled, with no manual step.
      await waitFor(() => readyz(final.url), 60_000, 'readiness after the last restart', {
        ok: (r) => r.status === 200,
      });
      const expected = new Map<string, NonNullable<ClusterState>>();
      const listed = await waitFor(
        () => final.client.request('GET', '/v1/clusters'),
        60_000,
        'every cluster applied',
        {
          ok: (r) =>
            r.status === 200 &&
            (r.body.clusters as Array<{ state: string }>).every((c) => c.state === 'applied'),
        },
      );
      const stored = new Map<string, { host: string }>(
        (listed.body.clusters as Array<{ name: string; host: string }>).map((c) => [c.name, c]),
      );
      for (const name of names) {
        const want = acked.get(name) ?? null;
        const alternatives = [want, ...(maybe.get(name) ?? [])];
        const got = stored.get(name);
        const match = alternatives.find((a) => (a === null ? got === undefined : got?.host === a.host));
        expect(
          match,
          `${name}: stored ${JSON.stringify(got)}, acknowledged ${JSON.stringify(want)}`,
        ).not.toBe(undefined);
        if (match) expected.set(name, match);
      }

      // A deletion acknowledged just before has no status to wait for: one more pass, started after every
      // acknowledged change, is what "converged" means (the status list alone missed a DELETE answered last).
      const settled = await final.client.request('POST', '/v1/reconcile?wait=true');
      expect(settled.status, JSON.stringify(settled.body)).toBe(200);

      // HAProxy runs exactly those routes: the master CLI's view, then real TLS handshakes with SNI.
      const routes = await bed.routes();
      const wantRoutes = new Map(
        [...expected.values()].map((s) => [
          s.host,
          [`127.0.0.1:${servers.find((x) => x.name === s.server)?.port}`],
        ]),
      );
      expect(Object.fromEntries(routes), `seed ${seed}`).toEqual(Object.fromEntries(wantRoutes));
      for (const [name, s] of expected) {
        expect({ name, probe: await sniProbe(bed.sniPort, s.host) }).toEqual({
          name,
          probe: { reached: s.server },
        });
      }
      for (const name of names.filter((n) => !expected.has(n)).slice(0, 6)) {
        expect(await sniProbe(bed.sniPort, `${name}.example.com`)).toHaveProperty('failed');
      }
      // No transaction left open and no ledger, those seen right after a kill included.
      const open = { open: await bed.openTransactions(), ledger: bed.ledger() };
      expect(open).toEqual({ open: [], ledger: [] });
      await final.stop();
      expect({ open: await bed.openTransactions(), ledger: bed.ledger() }).toEqual({ open: [], ledger: [] });
      // A kill during a write leaves no half-written file behind (state, owned file).
      const leftovers = bed.writeDirs.flatMap((d) =>
        readdirSync(d)
          .filter((f) => f.endsWith('.tmp'))
          .map((f) => join(d, f)),
      );
      console.log(
        `[measure] kill -9 (${provider}): seed ${seed}, ${kills} kills, ${CHANGES} changes, ${acknowledged} acknowledged, ${inFlightAtKill} unanswered (in flight at a kill), ${refusedWhileUp} refused, ${expected.size} routes at the end, ${leftovers.length} temporary files left${provider === 'haproxy' ? '' : `, ${openAtKills.size} transactions seen open right after the kills, ${open.open.length} at the end`}`,
      );
      expect(kills).toBeGreaterThanOrEqual(3);
      expect(acknowledged).toBeGreaterThan(CHANGES / 2);
      expect(refusedWhileUp).toBe(0);
      expect(leftovers, `temporary files left: ${leftovers.join(', ')}`).toEqual([]);
    });
  },
);
