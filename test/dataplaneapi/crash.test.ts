import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LEDGER_FILE } from '../../src/providers/dataplaneapi/sweep.js';
import { dataplaneSource } from '../support/dataplaneapi-testbed.js';
import { haproxyVersionUnderTest } from '../support/haproxy-testbed.js';
import { type ServiceProcess, startServiceProcess } from '../support/service-process.js';
import { sniProbe } from '../support/tls.js';
import { waitFor } from '../support/wait.js';
import { type KillBed, random, removeFolder, startKillBed, stateFolder } from './kill-support.js';

const source = dataplaneSource();
/** How many kill -9: 5 by default (CI); the proof runs 200 (`KUBEBYON_TEST_KILLS=200`). */
const KILLS = Number(process.env.KUBEBYON_TEST_KILLS ?? 5);
const SEED = Number(process.env.KUBEBYON_TEST_KILL_SEED ?? 20261204);
const CLUSTERS = 8;
const SERVERS = ['a', 'b', 'c'];
/** A kill lands this long at most after the burst began (or, for a kill during a start, after the spawn). */
const BURST_MS = 1500;
const START_KILL_MS = 1200;
/** Per cycle, a start is killed too (before or while it sweeps, reads and applies) this often. */
const START_KILL_SHARE = 0.25;

/** What one cluster may be: routed under one of its two hosts to one stand-in server, or absent. */
type Want = { host: string; server: string } | null;

const keep = { keepOutputChars: 200_000, startTimeoutMs: 60_000, stopGraceMs: 30_000 };

// The Data Plane API never expires a transaction, and caps how many may be open (20 by default): one left
// behind by a killed writer stops every writer a little closer to the cap. The service opens none (every
// change is one versioned push, `files.ts`); at start it deletes those an older release's ledger lists and
// those the configuration's version has moved past (`sweep.ts`). Proved here with the service as it ships,
// killed -9 at random (seeded) instants of bursts of signed webhook changes.
describe.skipIf(!source)(
  `kill -9 of the service, Data Plane API, HAProxy ${haproxyVersionUnderTest()}`,
  () => {
    let bed: KillBed;
    const running = new Set<ServiceProcess>();
    const folders: string[] = [];

    const start = async (stateDir: string, until: 'healthz' | 'spawned' = 'healthz') => {
      const p = await startServiceProcess(bed.env(stateDir), bed.secret, { ...keep, until });
      running.add(p);
      void p.exit.then(() => running.delete(p));
      return p;
    };

    /** Waits until exactly `ids` are in progress: an implicit transaction of a push under way may end first. */
    const onlyOpen = (ids: string[]) =>
      waitFor(() => bed.openTransactions(), 15_000, `exactly ${ids.join()} open`, {
        ok: (open) => open.join() === [...ids].sort().join(),
        everyMs: 100,
      });

    beforeAll(async () => {
      if (!source) return;
      bed = await startKillBed(source, SERVERS);
    });
    afterAll(async () => {
      await Promise.all([...running].map((p) => p.kill9()));
      await bed?.stop();
      for (const d of folders) removeFolder(d);
    });

    it('sweeps at start exactly the transactions that can never commit or that an older release left', async () => {
      const dir = stateFolder();
      folders.push(dir);
      expect(await bed.openTransactions()).toEqual([]);
      // Another tool's transaction, then the version moved past it: it can never commit.
      const outdated = await bed.openTransaction(await bed.configVersion());
      const version = await bed.bumpVersion();
      // An older release's transaction, listed in its ledger (and an id the API no longer has).
      const ours = await bed.openTransaction(version);
      writeFileSync(join(dir, LEDGER_FILE), JSON.stringify({ open: [ours, 'c0ffee00-gone'] }));
      // Another tool's transaction at the current version: it may still commit, so it is not the service's to drop.
      const foreign = await bed.openTransaction(version);
      const before = await bed.transactions();
      expect(before.filter((t) => t.status === 'in_progress').map((t) => t.id)).toEqual(
        expect.arrayContaining([outdated, ours, foreign]),
      );
      expect(before.find((t) => t.id === outdated)?._version).toBeLessThan(version);

      const service = await start(dir);
      await waitFor(
        () => !existsSync(join(dir, LEDGER_FILE)),
        60_000,
        'the old ledger to be swept and removed',
      );
      // Swept before the ledger went: never listed again. The service's first push may be under way, in
      // the API's implicit transaction for it, which ends with the push (seen on v3.0.23).
      const after = await bed.openTransactions();
      expect(after).toContain(foreign);
      expect(after).not.toContain(ours);
      expect(after).not.toContain(outdated);
      await onlyOpen([foreign]);
      // A change, so that the service writes: the version moves past the foreign transaction too.
      const res = await service.client.request('PUT', '/v1/clusters/planted?wait=true', {
        control_plane_host: 'planted.kill.example.com',
        public_access_mode: 'loadbalancer',
        node_port: bed.servers[0]?.port,
      });
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      expect(await sniProbe(bed.sniPort, 'planted.kill.example.com')).toEqual({ reached: 'a' });
      expect(await bed.configVersion()).toBeGreaterThan(version);
      // Still open: a start sweeps once, and it could commit then. The next start finds it outdated.
      await onlyOpen([foreign]);
      await service.kill9();
      const again = await start(dir);
      await waitFor(
        () => bed.openTransactions(),
        60_000,
        'the now outdated foreign transaction to be swept',
        {
          ok: (open) => open.length === 0,
        },
      );
      expect(await sniProbe(bed.sniPort, 'planted.kill.example.com')).toEqual({ reached: 'a' });
      expect(await again.stop()).toBe(0);
      expect(existsSync(join(dir, LEDGER_FILE))).toBe(false);
    }, 300_000);

    it(
      `leaves no transaction open and routes every acknowledged change after each of ${KILLS} kill -9`,
      async () => {
        const dir = stateFolder();
        folders.push(dir);
        // Two streams: the changes' draws depend on how many a burst sent before its kill; the kill schedule's do
        // not, so the n-th kill lands at the same instant of its burst in every run with this seed.
        const rand = random(SEED);
        const schedule = random(SEED + 1);
        const started = Date.now();
        const names = Array.from({ length: CLUSTERS }, (_, i) => `k${String(i).padStart(2, '0')}`);
        const hostsOf = (name: string) => [`${name}.kill.example.com`, `${name}-alt.kill.example.com`];
        const portOf = (server: string) => bed.servers.find((s) => s.name === server)?.port;
        // Per cluster: the last acknowledged state, and states sent since that a kill left unanswered (each may
        // or may not have been stored: a change is acknowledged only once it is on disk).
        const acked = new Map<string, Want>(names.map((n) => [n, null]));
        const maybe = new Map<string, Want[]>(names.map((n) => [n, []]));
        const m = {
          kills: 0,
          killsInStart: 0,
          sent: 0,
          acknowledged: 0,
          unanswered: 0,
          refused: 0,
          restarts: 0,
          // Transactions the API listed in progress right after a kill: the implicit one of a configuration push
          // the API was still carrying out for the dead process, if any. Each must be gone once it finished.
          inFlightAtKill: 0,
          // In progress when the restarted service had converged, and still after it went quiet: none may be.
          leftOpen: 0,
          routedChecks: 0,
          handshakes: 0,
        };
        let n = 0;

        /** Sends changes to `p` until `killed()`, two senders on disjoint clusters (one change per cluster at a time). */
        const burst = async (p: ServiceProcess, killed: () => boolean) => {
          const sender = async (part: number) => {
            while (!killed()) {
              const mine = names.filter((_, i) => i % 2 === part);
              const name = mine[Math.floor(rand() * mine.length)] as string;
              const roll = rand();
              const [main, alt] = hostsOf(name) as [string, string];
              const server = SERVERS[Math.floor(rand() * SERVERS.length)] as string;
              const next: Want = roll < 0.2 ? null : { host: roll < 0.35 ? alt : main, server };
              const i = n++;
              m.sent++;
              let status = 0;
              try {
                const res =
                  next === null
                    ? await p.client.request('DELETE', `/v1/clusters/${name}?n=${i}`)
                    : await p.client.request('PUT', `/v1/clusters/${name}?n=${i}`, {
                        control_plane_host: next.host,
                        public_access_mode: 'loadbalancer',
                        node_port: portOf(next.server),
                      });
                status = res.status;
              } catch {
                // No answer: the process died under the call, maybe after it stored the change.
              }
              if (status === 202) {
                acked.set(name, next);
                maybe.set(name, []);
                m.acknowledged++;
              } else if (status === 0 || killed() || p.exited) {
                maybe.get(name)?.push(next);
                m.unanswered++;
              } else {
                m.refused++;
              }
              await sleep(rand() * 25);
            }
          };
          await Promise.all([sender(0), sender(1)]);
        };

        /** Runs a burst against `p` and kills it -9 `afterMs` from now (the burst begins once `p` answers). */
        const killDuring = async (p: ServiceProcess, afterMs: number) => {
          let killed = false;
          const killer = sleep(afterMs).then(async () => {
            killed = true;
            await p.kill9();
          });
          const up = await waitFor(
            async () => killed || (await fetch(`${p.url}/healthz`)).ok,
            60_000,
            'the service to answer before its burst',
            { everyMs: 20 },
          );
          if (up && !killed) await burst(p, () => killed);
          await killer;
          m.kills++;
        };

        /** What each cluster is now, as a restarted service stores and routes it; settles `acked`. */
        const verify = async (p: ServiceProcess) => {
          // One full pass after the restart, started after it: what "converged" means.
          await waitFor(
            // A new query each time: the same signed call repeated within a second is signed a second later.
            () => p.client.request('POST', `/v1/reconcile?wait=true&n=${n++}`),
            180_000,
            'a full pass to succeed after the restart',
            { ok: (r) => r.status === 200, everyMs: 250 },
          );
          const listed = await p.client.request('GET', '/v1/clusters');
          expect(listed.status).toBe(200);
          const stored = new Map<string, { host: string; servers: string[] }>(
            (listed.body.clusters as Array<{ name: string; host: string; servers: string[] }>).map((c) => [
              c.name,
              c,
            ]),
          );
          const want = new Map<string, Want>();
          for (const name of names) {
            const got = stored.get(name);
            const candidates = [acked.get(name) ?? null, ...(maybe.get(name) ?? [])];
            const match = candidates.find((c) =>
              c === null
                ? got === undefined
                : got?.host === c.host && got.servers.includes(`127.0.0.1:${portOf(c.server)}`),
            );
            expect(
              match,
              `seed ${SEED}, kill ${m.kills}: ${name} stored as ${JSON.stringify(got)}, acknowledged ${JSON.stringify(candidates[0])}, unanswered ${JSON.stringify(candidates.slice(1))}`,
            ).not.toBe(undefined);
            want.set(name, match ?? null);
            acked.set(name, match ?? null);
            maybe.set(name, []);
          }
          // Routed: real TLS handshakes through HAProxy with each host as SNI reach the acknowledged server; a
          // host no cluster holds reaches the console (the foreign default backend).
          const expected = names.flatMap((name) =>
            (hostsOf(name) as string[]).map((host) => {
              const w = want.get(name);
              return { host, reached: w && w.host === host ? w.server : 'console' };
            }),
          );
          const seen = await waitFor(
            () =>
              Promise.all(
                expected.map(async (e) => ({
                  host: e.host,
                  reached: reachedOf(await sniProbe(bed.sniPort, e.host)),
                })),
              ),
            30_000,
            'every acknowledged change to be routed',
            { ok: (got) => JSON.stringify(got) === JSON.stringify(expected), everyMs: 200 },
          ).catch((err: Error) => {
            throw new Error(
              `seed ${SEED}, kill ${m.kills}: ${err.message}\nwanted ${JSON.stringify(expected)}\nthe service's log:\n${p.output().slice(-4000)}`,
            );
          });
          m.routedChecks++;
          m.handshakes += seen.length;
        };

        let p = await start(dir);
        while (m.kills < KILLS) {
          // A kill at a random instant of a burst.
          await killDuring(p, 50 + schedule() * BURST_MS);
          // Sometimes the next start is killed too: while it sweeps, reads HAProxy, applies what it stored.
          if (m.kills < KILLS && schedule() < START_KILL_SHARE) {
            p = await start(dir, 'spawned');
            await killDuring(p, schedule() * START_KILL_MS);
            m.killsInStart++;
          }
          const atKill = await bed.openTransactions();
          m.inFlightAtKill += atKill.length;
          p = await start(dir);
          m.restarts++;
          await verify(p);
          // No transaction is open that the service cannot account for: none at all. One the API was still
          // carrying out for a request (its implicit transaction) ends with it; allow for that, never longer.
          const open = await waitFor(() => bed.openTransactions(), 15_000, 'no open transaction', {
            ok: (ids) => ids.length === 0,
            everyMs: 100,
          }).catch(async () => bed.openTransactions());
          m.leftOpen += open.length;
          expect(
            open,
            `seed ${SEED}, kill ${m.kills}: transactions left open (right after the kill: ${atKill.join()})`,
          ).toEqual([]);
          expect(existsSync(join(dir, LEDGER_FILE)), 'a transaction ledger written').toBe(false);
          if (m.kills % 10 === 0 || m.kills >= KILLS)
            console.log(
              `[progress] ${m.kills}/${KILLS} kills, ${Math.round((Date.now() - started) / 1000)} s`,
            );
        }
        // A graceful stop leaves nothing open either.
        expect(await p.stop()).toBe(0);
        expect(await bed.openTransactions()).toEqual([]);
        const all = await bed.transactions();
        const wallS = (Date.now() - started) / 1000;
        console.log(
          `[measure] kill -9, Data Plane API ${source?.kind === 'bin' ? source.path : 'image'}, HAProxy ${haproxyVersionUnderTest()}: seed ${SEED}, ${m.kills} kills (${m.killsInStart} during a start), ${m.restarts} restarts verified, ${m.sent} changes sent, ${m.acknowledged} acknowledged (202), ${m.unanswered} unanswered (in flight at a kill), ${m.refused} refused; transactions in progress right after the kills: ${m.inFlightAtKill}, left open after the restarts: ${m.leftOpen}; ${m.routedChecks} routed checks, ${m.handshakes} SNI handshakes right; transactions the API lists at the end (any status): ${all.length}; wall ${wallS.toFixed(1)} s`,
        );
        expect(m.kills).toBe(KILLS);
        expect(m.refused).toBe(0);
        expect(m.acknowledged).toBeGreaterThan(0);
      },
      Math.max(600_000, KILLS * 120_000),
    );
  },
);

function reachedOf(probe: { reached: string } | { failed: string }): string {
  return 'reached' in probe ? probe.reached : `failed: ${probe.failed}`;
}
