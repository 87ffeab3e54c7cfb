import { connect, createServer } from 'node:tls';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { RenderOptions } from '../../src/haproxy/render.js';
import { readCapabilities } from '../../src/providers/dataplaneapi/capability.js';
import { backendLines, frontendLines, lineTagsFor } from '../../src/providers/dataplaneapi/config-text.js';
import { type DataplaneProvider, RUNTIME_MAX_REQUESTS } from '../../src/providers/dataplaneapi/provider.js';
import { slotsFileName } from '../../src/providers/dataplaneapi/slots.js';
import { legacyRulesState } from '../support/legacy-rules.js';
import { registry } from '../support/owner.js';
import { sniProbe, testKeyPair } from '../support/tls.js';
import { waitFor } from '../support/wait.js';
import {
  type Harness,
  pass,
  rawConfig,
  readsGeneralFiles,
  record,
  resetToForeign,
  source,
  startHarness,
  versionUnderTest,
} from './harness.js';

/**
 * Map routing through a real Data Plane API: routes added, moved and deleted at runtime with no reload and
 * reachable by a real TLS handshake carrying SNI; the runtime servers written to the file without a reload,
 * so that a reload afterwards keeps every route; an install of per-route backends moved over in one pass.
 */
const SNI_MAP = 'kubebyon-test.sni.map';
const STORED = 'kubebyon-test_sni.map';

/** HAProxy 2.6 behind the API: runtime servers cannot be enabled (see versions.md), so changes reload. */
const runtime = it.skipIf(versionUnderTest() === '2.6');

// Slot backends in the configuration (the default), and in the API's general storage (the slots file).
for (const slots of ['config', 'storage'] as const)
  describe.skipIf(!source)(
    `Data Plane API map routing on HAProxy ${versionUnderTest()}, slots in ${slots}`,
    () => {
      let h: Harness;
      let provider: DataplaneProvider;
      let map: RenderOptions;
      const made: DataplaneProvider[] = [];
      const mapProvider = (o: Parameters<Harness['provider']>[0] = {}) => {
        const p = h.provider({ sniMaps: [SNI_MAP], slots, ...o });
        made.push(p);
        return p;
      };
      const alpha = () => record('alpha', 'alpha.example.com', h.alpha.port);
      const beta = () => record('beta', 'beta.example.com', h.beta.port);

      /** Slots in storage need an API that reads its general storage files back (v3.4 and newer). */
      let unable = false;
      beforeAll(async () => {
        h = await startHarness();
        map = { ...h.render, sniMap: SNI_MAP, minSlots: 4, healthChecks: false };
        unable = slots === 'storage' && !(await readsGeneralFiles(h));
      });
      afterAll(async () => {
        await h?.close();
      });
      beforeEach(async (ctx) => {
        if (unable && !ctx.task.name.startsWith('refuses'))
          ctx.skip('the API cannot read back its general storage files');
        // A write of runtime servers still due from the last test would race the reset.
        for (const p of made.splice(0)) await p.persisted().catch(() => {});
        await resetToForeign(h.tb);
        provider = mapProvider();
      });

      /** Servers of slot backends as the file holds them, `backend/address:port`. */
      async function slotServersInFile(): Promise<string[]> {
        const out: string[] = [];
        let backend = '';
        for (const line of (await slotsText()).split('\n')) {
          const b = /^backend (\S+)/.exec(line);
          if (b?.[1]) backend = b[1];
          const s = /^\s+server \S+ (\S+)/.exec(line);
          if (s?.[1] && /slot_\d+$/.test(backend))
            out.push(`${backend.replace(/^.*(slot_\d+)$/, '$1')}/${s[1]}`);
        }
        return out.sort();
      }

      /** The text the slot backends are in: the configuration, or the slots file. */
      async function slotsText(): Promise<string> {
        if (slots === 'config') return rawConfig(h.tb);
        const list = (await h.tb.api.get('/services/haproxy/storage/general')).data as Array<{
          storage_name: string;
        }>;
        const prefix = `${slotsFileName(registry.id)}_`;
        const names = list.map((f) => f.storage_name).filter((n) => n.startsWith(prefix));
        const texts = await Promise.all(
          // As a file: v3.0.23 and v3.2.15 answer `{}` as JSON to axios' JSON-first default.
          names.map((n) =>
            h.tb.api.get(`/services/haproxy/storage/general/${n}`, {
              headers: { Accept: 'application/octet-stream' },
              responseType: 'text',
            }),
          ),
        );
        for (const r of texts)
          if (typeof r.data !== 'string' || r.status !== 200)
            throw new Error(`slots file not read as text: ${r.status} ${JSON.stringify(r.data)}`);
        return texts.map((r) => String(r.data)).join('\n');
      }

      runtime(
        'adds, moves and deletes routes at runtime, persists them without a reload, and a reload keeps them',
        async () => {
          const first = await pass(h, provider, [alpha()], map);
          expect(first.result.ok, first.result.error).toBe(true);
          expect(await sniProbe(h.sniPort, 'alpha.example.com')).toEqual({ reached: 'alpha' });
          const loads = await h.tb.loads();

          const t0 = performance.now();
          const add = await pass(h, provider, [alpha(), beta()], map);
          const addMs = performance.now() - t0;
          expect(add.result.ok, add.result.error).toBe(true);
          expect(await sniProbe(h.sniPort, 'BETA.example.com')).toEqual({ reached: 'beta' });

          const moved = record('alpha', 'alpha.example.com', h.gamma.port);
          const move = await pass(h, provider, [moved, beta()], map);
          expect(move.result.ok, move.result.error).toBe(true);
          expect(await sniProbe(h.sniPort, 'alpha.example.com')).toEqual({ reached: 'gamma' });

          const t1 = performance.now();
          const del = await pass(h, provider, [moved], map);
          const delMs = performance.now() - t1;
          expect(del.result.ok, del.result.error).toBe(true);
          expect(await sniProbe(h.sniPort, 'beta.example.com')).toEqual({ reached: 'console' });
          expect(await h.tb.loads()).toBe(loads);

          // Written to the file within about a second, still without a reload.
          await waitFor(
            async () => (await slotServersInFile()).join() === `slot_00001/127.0.0.1:${h.gamma.port}`,
            5_000,
            'the runtime servers in the file',
            { everyMs: 50 },
          ).catch(async (err) => {
            throw new Error(`${err}: ${(await slotServersInFile()).join()}`);
          });
          expect(await h.tb.loads()).toBe(loads);
          const stored = await h.tb.api.get(`/services/haproxy/runtime/maps/${STORED}/entries`);
          expect(
            (stored.data as Array<{ key: string; value: string }>).map(
              (e) => `${e.key} ${e.value.replace(/^.*(slot_\d+)$/, '$1')}`,
            ),
          ).toEqual(['alpha.example.com slot_00001']);
          console.log(
            `[${versionUnderTest()} ${h.tb.version}] add pass ${addMs.toFixed(0)} ms, delete pass ${delMs.toFixed(0)} ms, persistence`,
            provider.lastPersistence(),
          );

          // A reload by someone else: the route is in the files HAProxy loads.
          await h.tb.masterCli('reload');
          await waitFor(() => h.tb.loadCount() > loads, 10_000, 'the forced reload', { everyMs: 25 });
          await waitFor(
            async () =>
              JSON.stringify(await sniProbe(h.sniPort, 'alpha.example.com')) === '{"reached":"gamma"}',
            5_000,
            'alpha after the reload',
          );
          const again = await pass(h, mapProvider(), [moved], map);
          expect(again.result.ok, again.result.error).toBe(true);
          expect(again.changed).toBe(false);
        },
      );

      runtime('deletes a route whose server holds an open stream (like a watch)', async () => {
        // A backend that keeps every connection open, as an API server does for a watch.
        const held = createServer(testKeyPair(), (socket) => socket.write('held\n'));
        await new Promise<void>((resolve) => held.listen(0, '127.0.0.1', () => resolve()));
        const port = (held.address() as { port: number }).port;
        const watch = record('watch', 'watch.example.com', port);
        try {
          expect((await pass(h, provider, [alpha(), watch], map)).result.ok).toBe(true);
          const stream = connect({
            host: '127.0.0.1',
            port: h.sniPort,
            servername: 'watch.example.com',
            rejectUnauthorized: false,
          });
          await new Promise<void>((resolve) => stream.once('data', () => resolve()));
          const closed = new Promise<void>((resolve) => stream.once('close', () => resolve()));
          const loads = await h.tb.loads();
          // The route closes at once; HAProxy refuses to delete a server with a connection and the API has no
          // `shutdown sessions`: the server drains in maintenance, and the pass does not fail for it.
          const del = await pass(h, provider, [alpha()], map);
          expect(del.result.ok, del.result.error).toBe(true);
          expect(await sniProbe(h.sniPort, 'watch.example.com')).toEqual({ reached: 'console' });
          expect(stream.destroyed).toBe(false);
          stream.destroy();
          await closed;
          // Once HAProxy has closed the stream a pass deletes the server, and then there is nothing left to do.
          await waitFor(
            async () => {
              const p = await pass(h, provider, [alpha()], map);
              return p.result.ok && !p.changed;
            },
            10_000,
            'the drained server deleted',
            { everyMs: 100 },
          );
          expect((await pass(h, mapProvider(), [alpha()], map)).changed).toBe(false);
          expect(await h.tb.loads()).toBe(loads);
        } finally {
          held.close();
        }
      });

      runtime(
        'moves a route whose server holds an open stream: the stream stays, new connections move',
        async () => {
          const held = createServer(testKeyPair(), (socket) => socket.write('held\n'));
          await new Promise<void>((resolve) => held.listen(0, '127.0.0.1', () => resolve()));
          const port = (held.address() as { port: number }).port;
          try {
            expect(
              (await pass(h, provider, [alpha(), record('watch', 'watch.example.com', port)], map)).result.ok,
            ).toBe(true);
            const stream = connect({
              host: '127.0.0.1',
              port: h.sniPort,
              servername: 'watch.example.com',
              rejectUnauthorized: false,
            });
            stream.on('error', () => {});
            await new Promise<void>((resolve) => stream.once('data', () => resolve()));
            const loads = await h.tb.loads();
            // The server carries a stream: deleting it at runtime would be refused, so its address moves in place.
            const move = await pass(
              h,
              provider,
              [alpha(), record('watch', 'watch.example.com', h.gamma.port)],
              map,
            );
            expect(move.result.ok, move.result.error).toBe(true);
            expect(await sniProbe(h.sniPort, 'watch.example.com')).toEqual({ reached: 'gamma' });
            expect(stream.destroyed).toBe(false);
            expect(await h.tb.loads()).toBe(loads);
            stream.destroy();
          } finally {
            held.close();
          }
        },
      );

      runtime(
        'a reload by someone else before persistence: the revision changes and a fresh pass puts the route back',
        async () => {
          expect((await pass(h, provider, [alpha()], map)).result.ok).toBe(true);
          const slow = mapProvider({ persistDelayMs: 60_000 });
          expect((await pass(h, slow, [alpha(), beta()], map)).result.ok).toBe(true);
          const before = await slow.revision(AbortSignal.timeout(5_000));
          const loads = await h.tb.loads();
          await h.tb.masterCli('reload');
          await waitFor(() => h.tb.loadCount() > loads, 10_000, 'the reload', { everyMs: 25 });
          // Neither beta's server nor its map entry had reached the files: the new worker has neither.
          await waitFor(
            async () => (await slow.revision(AbortSignal.timeout(5_000))) !== before,
            5_000,
            'a new revision',
          );
          expect(await sniProbe(h.sniPort, 'beta.example.com')).not.toEqual({ reached: 'beta' });
          const t0 = performance.now();
          const repair = await pass(h, slow, [alpha(), beta()], map);
          const repairMs = performance.now() - t0;
          expect(repair.result.ok, repair.result.error).toBe(true);
          expect(repair.changed).toBe(true);
          expect(await sniProbe(h.sniPort, 'beta.example.com')).toEqual({ reached: 'beta' });
          expect(await h.tb.loads()).toBe(loads + 1);
          console.log(
            `[${versionUnderTest()} ${h.tb.version}] repair pass after a reload ${repairMs.toFixed(0)} ms`,
          );
        },
      );

      runtime(
        'finds runtime servers missing from the file (a crash before persistence) and writes them',
        async () => {
          expect((await pass(h, provider, [alpha()], map)).result.ok).toBe(true);
          // A provider that would persist only after a minute stands for one killed before it did.
          const doomed = mapProvider({ persistDelayMs: 60_000 });
          const loads = await h.tb.loads();
          expect((await pass(h, doomed, [alpha(), beta()], map)).result.ok).toBe(true);
          expect(await sniProbe(h.sniPort, 'beta.example.com')).toEqual({ reached: 'beta' });
          expect(await slotServersInFile()).toHaveLength(1);
          // The next process reads what HAProxy runs and writes what the file lacks.
          const next = mapProvider();
          const report = await pass(h, next, [alpha(), beta()], map);
          expect(report.changed).toBe(false);
          await waitFor(
            async () => (await slotServersInFile()).length === 2,
            5_000,
            'both servers in the file',
          );
          expect(await h.tb.loads()).toBe(loads);
        },
      );

      runtime('many new routes in one pass, side by side: all routable, none lost, no reload', async () => {
        const roomy = { ...map, minSlots: 128 };
        expect((await pass(h, provider, [alpha()], roomy)).result.ok).toBe(true);
        await provider.persisted();
        const loads = await h.tb.loads();
        const host = (i: number) => `${'p'.repeat(48)}-${String(i).padStart(3, '0')}.example.com`;
        const many = Array.from({ length: 60 }, (_, i) => record(`p${i}`, host(i), h.beta.port));
        const add = await pass(h, provider, [alpha(), ...many], roomy);
        expect(add.result.ok, add.result.error).toBe(true);
        const entries = await h.tb.api.get(`/services/haproxy/runtime/maps/${STORED}/entries`);
        expect((entries.data as unknown[]).length).toBe(61);
        for (const i of [0, 29, 59]) expect(await sniProbe(h.sniPort, host(i))).toEqual({ reached: 'beta' });
        expect(await sniProbe(h.sniPort, 'alpha.example.com')).toEqual({ reached: 'alpha' });
        expect(await h.tb.loads()).toBe(loads);
        expect((await pass(h, mapProvider(), [alpha(), ...many], roomy)).changed).toBe(false);
      });

      it.runIf(versionUnderTest() === '2.6')(
        'on HAProxy 2.6 a new route is written and reloaded, and routable',
        async () => {
          expect((await pass(h, provider, [alpha()], map)).result.ok).toBe(true);
          const loads = await h.tb.loads();
          const add = await pass(h, provider, [alpha(), beta()], map);
          expect(add.result.ok, add.result.error).toBe(true);
          await waitFor(() => h.tb.loadCount() > loads, 10_000, 'the reload');
          await waitFor(
            async () =>
              JSON.stringify(await sniProbe(h.sniPort, 'beta.example.com')) === '{"reached":"beta"}',
            5_000,
            'beta routable',
          );
          expect((await pass(h, mapProvider(), [alpha(), beta()], map)).changed).toBe(false);
        },
      );

      /**
       * What a release before map routing left (`KUBEBYON_HAPROXY_ROUTING=rules`): per-route backends and
       * `use_backend ... if { req.ssl_sni -i ... }` rules, written into the configuration as another tool would,
       * tags where this API version keeps them, and loaded.
       */
      async function installRules(records: ReturnType<typeof record>[]): Promise<void> {
        const check = readCapabilities((await h.tb.api.get('/specification_openapiv3')).data);
        if (!check.ok) throw new Error(`API lacks ${check.missing.join(', ')}`);
        const t = lineTagsFor(check.capabilities);
        const routes = records.map((r) => ({
          cluster: r.name,
          host: r.host,
          endpoints: [{ address: '127.0.0.1', port: 'nodePort' in r.target ? r.target.nodePort : 0 }],
          networks: [],
        }));
        const state = legacyRulesState(routes, registry, {
          name: h.render.frontendName,
          bind: h.render.bind,
          defaultBackend: h.render.defaultBackend,
        });
        const lines = [
          ...state.frontends.flatMap((f) => [...frontendLines(f, { sniMap: undefined }, t), '']),
          ...state.backends.flatMap((b) => [...backendLines(b, t), '']),
        ];
        const version = (await h.tb.api.get('/services/haproxy/configuration/version')).data as number;
        const text = `${(await rawConfig(h.tb)).trimEnd()}\n\n${lines.join('\n')}`;
        const loads = await h.tb.loads();
        const put = await h.tb.api.post(
          `/services/haproxy/configuration/raw?version=${version}&force_reload=true`,
          text,
          { headers: { 'Content-Type': 'text/plain' } },
        );
        if (put.status >= 300)
          throw new Error(`rules install refused: ${put.status} ${JSON.stringify(put.data)}`);
        await waitFor(() => h.tb.loadCount() > loads, 10_000, 'the rules install loaded', { everyMs: 25 });
      }

      it('moves an install of per-route backends and rules to the map in one pass with one reload', async () => {
        await installRules([alpha(), beta()]);
        expect(await sniProbe(h.sniPort, 'alpha.example.com')).toEqual({ reached: 'alpha' });
        const loads = await h.tb.loads();
        const upgrade = await pass(h, mapProvider(), [alpha(), beta()], map);
        expect(upgrade.result.ok, upgrade.result.error).toBe(true);
        await waitFor(() => h.tb.loadCount() === loads + 1, 10_000, 'one reload');
        expect(await sniProbe(h.sniPort, 'alpha.example.com')).toEqual({ reached: 'alpha' });
        expect(await sniProbe(h.sniPort, 'beta.example.com')).toEqual({ reached: 'beta' });
        const text = await rawConfig(h.tb);
        expect(text).toContain(`use_backend %[req.ssl_sni,lower,map(`);
        expect(text).not.toMatch(/use_backend \S+ if \{ req\.ssl_sni/);
        const converged = await pass(h, mapProvider(), [alpha(), beta()], map);
        expect(converged.changed).toBe(false);
        expect(await h.tb.loads()).toBe(loads + 1);
      });
      it.runIf(slots === 'storage')(
        'moves slot backends from the configuration to the slots file with one reload, every route kept',
        async () => {
          const before = h.provider({ sniMaps: [SNI_MAP] });
          made.push(before);
          expect((await pass(h, before, [alpha()], map)).result.ok).toBe(true);
          expect((await pass(h, before, [alpha(), beta()], map)).result.ok).toBe(true);
          await before.persisted();
          expect(await rawConfig(h.tb)).toMatch(/^backend \S+slot_00001/m);
          const loads = await h.tb.loads();
          const moved = await pass(h, provider, [alpha(), beta()], map);
          expect(moved.result.ok, moved.result.error).toBe(true);
          expect(moved.changed).toBe(false);
          await waitFor(() => h.tb.loadCount() === loads + 1, 10_000, 'one reload');
          expect(await rawConfig(h.tb)).not.toMatch(/^backend \S+slot_/m);
          expect(await slotServersInFile()).toEqual([
            `slot_00001/127.0.0.1:${h.alpha.port}`,
            `slot_00002/127.0.0.1:${h.beta.port}`,
          ]);
          expect(await sniProbe(h.sniPort, 'alpha.example.com')).toEqual({ reached: 'alpha' });
          expect(await sniProbe(h.sniPort, 'beta.example.com')).toEqual({ reached: 'beta' });
          expect((await pass(h, mapProvider(), [alpha(), beta()], map)).changed).toBe(false);
          expect(await h.tb.loads()).toBe(loads + 1);
        },
      );

      runtime(
        'a burst past RUNTIME_MAX_REQUESTS is written to the slots files and loaded by one reload',
        async () => {
          if (slots !== 'storage') return;
          // Three runtime requests a new route: one more route than the runtime takes in one plan.
          const count = Math.floor(RUNTIME_MAX_REQUESTS / 3) + 1;
          const roomy = { ...map, minSlots: 2 ** Math.ceil(Math.log2(count * 1.25)) };
          expect((await pass(h, provider, [alpha()], roomy)).result.ok).toBe(true);
          await provider.persisted();
          const loads = await h.tb.loads();
          const host = (i: number) => `burst-${String(i).padStart(3, '0')}.example.com`;
          const many = Array.from({ length: count }, (_, i) => record(`b${i}`, host(i), h.beta.port));
          const add = await pass(h, provider, [alpha(), ...many], roomy);
          expect(add.result.ok, add.result.error).toBe(true);
          await waitFor(() => h.tb.loadCount() === loads + 1, 10_000, 'one reload');
          for (const i of [0, count >> 1, count - 1])
            expect(await sniProbe(h.sniPort, host(i))).toEqual({ reached: 'beta' });
          expect(await sniProbe(h.sniPort, 'alpha.example.com')).toEqual({ reached: 'alpha' });
          expect(await slotServersInFile()).toHaveLength(count + 1);
          expect((await pass(h, mapProvider(), [alpha(), ...many], roomy)).changed).toBe(false);
          expect(await h.tb.loads()).toBe(loads + 1);
        },
      );
      it.runIf(slots === 'storage')(
        'refuses slots in storage, with the setting to use, where the API cannot read its files back (else reads)',
        async () => {
          if (!unable) {
            const read = await provider.read(AbortSignal.timeout(10_000));
            expect(read.raw.frontends.length).toBeGreaterThan(0);
            return;
          }
          await expect(provider.read(AbortSignal.timeout(10_000))).rejects.toThrow(
            /no general storage to read the slots files back from.*KUBEBYON_DATAPLANE_SLOTS=config/,
          );
        },
      );
    },
  );
