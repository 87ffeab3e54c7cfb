/**
 * Times the dataplaneapi provider against a real Data Plane API and HAProxy at N routes (bounded: one run
 * per size, loopback only, health checks off so that N servers do not probe anything):
 *
 *   KUBEBYON_TEST_DATAPLANEAPI_BIN=/path/to/dataplaneapi npx tsx bench/dataplaneapi.ts [10,1000,5000] [3.0]
 *
 * N routes are loaded by the provider's first pass (one push of the file: the setup, not what is measured);
 * then, behind the registry as the service runs it: a cold (fresh) read, a read answered from the kept
 * reading, a pass with nothing to do, one that adds a cluster, one endpoint move, and K endpoint moves in one
 * pass. (Until map routing was the only layout this loaded one backend and rule per route, and compared K
 * moves through the runtime path with one transaction to choose KUBEBYON_DATAPLANE_RUNTIME_MAX_SERVERS: both
 * retired, that comparison is gone.)
 */
import pino from 'pino';
import { DEFAULT_RENDER_OPTIONS, renderDesired } from '../src/haproxy/render.js';
import { plan } from '../src/plan/plan.js';
import { DataplaneProvider } from '../src/providers/dataplaneapi/provider.js';
import { OwnedProvider } from '../src/registry/owned-provider.js';
import { resolveRoutes } from '../src/routes/route.js';
import {
  DPAPI_USER,
  dataplaneSource,
  foreignConfig,
  startDataplaneTestbed,
} from '../test/support/dataplaneapi-testbed.js';
import type { HaproxyVersion } from '../test/support/haproxy-testbed.js';
import { registry } from '../test/support/owner.js';
import { freeLoopbackPort } from '../test/support/ports.js';
import { useLoopbackTestcontainers } from './compare/cli.js';

useLoopbackTestcontainers();
const sizes = (process.argv[2] ?? '10,1000,5000').split(',').map(Number);
const version = (process.argv[3] ?? '3.0') as HaproxyVersion;
const source = dataplaneSource();
if (!source) throw new Error('set KUBEBYON_TEST_DATAPLANEAPI_BIN or KUBEBYON_TEST_DATAPLANEAPI_IMAGE');

const claims = (n: number, moved: Set<string> = new Set(), extra: string[] = []) =>
  [...Array.from({ length: n }, (_, i) => `c${String(i).padStart(5, '0')}`), ...extra].map((c) => ({
    cluster: c,
    host: `${c}.example.com`,
    endpoints: [
      { address: '127.0.0.1', port: 30000 + ((Number(c.slice(1)) || 0) % 1000) + (moved.has(c) ? 1000 : 0) },
    ],
    claimedAt: 0,
  }));

async function main(): Promise<void> {
  const rows: string[] = [];
  for (const n of sizes) {
    const consolePort = await freeLoopbackPort();
    const sniPort = await freeLoopbackPort();
    const base = foreignConfig({ consolePort, consoleBackendPort: 9 });
    const tb = await startDataplaneTestbed(source as NonNullable<typeof source>, version, base);
    try {
      const render = {
        ...DEFAULT_RENDER_OPTIONS,
        bind: { address: '127.0.0.1', port: sniPort },
        defaultBackend: 'console_tls',
        healthChecks: false,
      };
      const inner = new DataplaneProvider({
        url: tb.url,
        username: DPAPI_USER,
        password: tb.password,
        timeoutMs: 600_000,
        reloadTimeoutMs: 600_000,
        owner: registry,
        logger: pino({ level: 'silent' }),
      });
      await inner.ready(AbortSignal.timeout(600_000));
      const provider = new OwnedProvider(inner, registry);
      const timed = async <T>(f: () => Promise<T>): Promise<[T, number]> => {
        const t = performance.now();
        const r = await f();
        return [r, Math.round(performance.now() - t)];
      };
      const pass = async (c: ReturnType<typeof claims>) =>
        timed(async () => {
          const current = await provider.read(AbortSignal.timeout(600_000));
          const pl = plan(renderDesired(resolveRoutes(c).routes, render), current.state);
          const report = await provider.apply(pl, current, AbortSignal.timeout(600_000));
          return { ops: pl.operations.length, ...report };
        });
      // The setup: N routes in one pass (slots, servers and map entries: one push of the file, one reload).
      const [setup, setupMs] = await pass(claims(n));
      if (setup.reload !== 'succeeded')
        throw new Error(`the setup pass did not reload: ${JSON.stringify(setup)}`);
      console.log(`N=${n}: setup pass ${setupMs} ms (${setup.ops} ops)`);
      const [, coldRead] = await timed(() => provider.read(AbortSignal.timeout(600_000), { fresh: true }));
      const [, cachedRead] = await timed(() => provider.read(AbortSignal.timeout(600_000)));
      const [steady, steadyMs] = await pass(claims(n));
      const [added, addMs] = await pass(claims(n, new Set(), ['new00001']));
      const loads = tb.loadCount();
      const [move, moveMs] = await pass(claims(n, new Set(['c00000']), ['new00001']));
      const movedLoads = tb.loadCount() - loads;
      rows.push(
        `| ${n} | ${coldRead} | ${cachedRead} | ${steadyMs} (${steady.ops} ops) | ${addMs} (${added.requests} requests, reload ${added.reload}) | ${moveMs} (${move.requests} requests, reload ${move.reload}, ${movedLoads} HAProxy loads) |`,
      );
      console.log(rows.at(-1));
      // K endpoint moves in one pass (the runtime path; no transaction any more).
      if (n >= 1000) {
        const all = new Set(['c00000']);
        let next = 10;
        const moveMore = (k: number) => {
          for (let i = 0; i < k; i++) all.add(`c${String(next++).padStart(5, '0')}`);
          return claims(n, all, ['new00001']);
        };
        for (const k of [2, 5, 10]) {
          const before = tb.loadCount();
          const [r, ms] = await pass(moveMore(k));
          if (r.ops !== k) throw new Error(`expected ${k} moves, planned ${r.ops}`);
          const line = `N=${n} K=${k}: ${ms} ms, ${r.requests} requests, reload ${r.reload}, ${tb.loadCount() - before} HAProxy loads`;
          rows.push(line);
          console.log(line);
        }
      }
      await inner.close();
    } finally {
      await tb.stop();
    }
  }
  console.log(`\nHAProxy ${version}, one run each, times in ms (pass = read + plan + apply)\n`);
  console.log(
    '| N | cold (fresh) read | kept read (revision unchanged) | pass, nothing to do | pass, one new cluster | pass, one endpoint move |',
  );
  console.log('| --- | --- | --- | --- | --- | --- |');
  for (const r of rows) console.log(r);
}

await main();
