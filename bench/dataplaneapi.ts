/**
 * Times the dataplaneapi provider against a real Data Plane API and HAProxy at N routes (bounded: one run
 * per size, loopback only, health checks off so that N servers do not probe anything):
 *
 *   KUBEBYON_TEST_DATAPLANEAPI_BIN=/path/to/dataplaneapi npx tsx bench/dataplaneapi.ts [10,1000,5000] [3.0]
 *
 * N routes are loaded in one raw push (the setup, not what is measured); then: a cold read, one pass that
 * adds a cluster, one endpoint move, and K endpoint moves through the runtime path versus one transaction.
 */
import pino from 'pino';
import { DEFAULT_RENDER_OPTIONS, renderDesired } from '../src/haproxy/render.js';
import { backendNameFor } from '../src/naming/names.js';
import { plan } from '../src/plan/plan.js';
import { DataplaneProvider } from '../src/providers/dataplaneapi/provider.js';
import { resolveRoutes } from '../src/routes/route.js';
import {
  DPAPI_USER,
  dataplaneSource,
  foreignConfig,
  startDataplaneTestbed,
} from '../test/support/dataplaneapi-testbed.js';
import type { HaproxyVersion } from '../test/support/haproxy-testbed.js';
import { interpret, ownerTags, registry } from '../test/support/owner.js';
import { freeLoopbackPort } from '../test/support/ports.js';
import { useLoopbackTestcontainers } from './compare/cli.js';

useLoopbackTestcontainers();
const sizes = (process.argv[2] ?? '10,1000,5000').split(',').map(Number);
const version = (process.argv[3] ?? '3.0') as HaproxyVersion;
const source = dataplaneSource();
if (!source) throw new Error('set KUBEBYON_TEST_DATAPLANEAPI_BIN or KUBEBYON_TEST_DATAPLANEAPI_IMAGE');

const meta = (tags: Record<string, string>) =>
  ` # ${JSON.stringify(
    Object.fromEntries(
      Object.entries(tags)
        .sort()
        .map(([k, v]) => [k, { value: v }]),
    ),
  )}`;

function ourSections(n: number, sniPort: number): string {
  const own = meta(ownerTags());
  const lines = [
    `frontend kubebyon_sni${own}`,
    '  mode tcp',
    `  bind 127.0.0.1:${sniPort} name kubebyon${own}`,
    `  tcp-request inspect-delay 5s${own}`,
    `  tcp-request content accept if { req.ssl_hello_type 1 }${own}`,
  ];
  const names = Array.from({ length: n }, (_, i) => `c${String(i).padStart(5, '0')}`);
  const sorted = [...names].sort((a, b) => (`${a}.example.com` < `${b}.example.com` ? -1 : 1));
  for (const c of sorted)
    lines.push(`  use_backend ${backendNameFor(c)} if { req.ssl_sni -i ${c}.example.com }${own}`);
  lines.push('  default_backend console_tls', '');
  for (const c of names) {
    lines.push(
      `backend ${backendNameFor(c)}${meta(ownerTags(c))}`,
      '  mode tcp',
      '  balance leastconn',
      `  server srv1 127.0.0.1:${30000 + (Number(c.slice(1)) % 1000)}${own}`,
      '',
    );
  }
  return lines.join('\n');
}

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
      const v = (await tb.api.get('/services/haproxy/configuration/version')).data as number;
      const pushed = await tb.api.post(
        `/services/haproxy/configuration/raw?version=${v}&force_reload=true`,
        `${base}\n${ourSections(n, sniPort)}\n`,
        { headers: { 'Content-Type': 'text/plain' }, timeout: 600_000 },
      );
      if (pushed.status >= 300)
        throw new Error(`raw push: ${pushed.status} ${String(pushed.data).slice(0, 500)}`);
      const render = {
        ...DEFAULT_RENDER_OPTIONS,
        bind: { address: '127.0.0.1', port: sniPort },
        defaultBackend: 'console_tls',
        healthChecks: false,
      };
      const make = (runtimeMaxServers: number) =>
        new DataplaneProvider({
          url: tb.url,
          username: DPAPI_USER,
          password: tb.password,
          timeoutMs: 600_000,
          reloadTimeoutMs: 600_000,
          runtimeMaxServers,
          owner: registry,
          logger: pino({ level: 'silent' }),
        });
      const provider = make(1_000_000);
      const timed = async <T>(f: () => Promise<T>): Promise<[T, number]> => {
        const t = performance.now();
        const r = await f();
        return [r, Math.round(performance.now() - t)];
      };
      const passWith = async (p: DataplaneProvider, c: ReturnType<typeof claims>) =>
        timed(async () => {
          const current = await p.readState(AbortSignal.timeout(600_000));
          const pl = plan(renderDesired(resolveRoutes(c).routes, render), interpret(current));
          const report = await p.apply(pl, current, AbortSignal.timeout(600_000));
          return { ops: pl.operations.length, ...report };
        });
      const [, coldRead] = await timed(() => provider.readState(AbortSignal.timeout(600_000)));
      const [, cachedRead] = await timed(() => provider.readState(AbortSignal.timeout(600_000)));
      const [steady, steadyMs] = await passWith(provider, claims(n));
      const [added, addMs] = await passWith(provider, claims(n, new Set(), ['new00001']));
      const loads = tb.loadCount();
      const [move, moveMs] = await passWith(provider, claims(n, new Set(['c00000']), ['new00001']));
      const movedLoads = tb.loadCount() - loads;
      rows.push(
        `| ${n} | ${coldRead} | ${cachedRead} | ${steadyMs} (${steady.ops} ops) | ${addMs} (${added.requests} requests, reload ${added.reload}) | ${moveMs} (${move.requests} request, reload ${move.reload}, ${movedLoads} HAProxy loads) |`,
      );
      console.log(rows.at(-1));
      // K endpoint moves: one by one through the runtime path, or all in one transaction.
      if (n >= 1000) {
        const all = new Set(['c00000']);
        let next = 10;
        const moveMore = (k: number) => {
          for (let i = 0; i < k; i++) all.add(`c${String(next++).padStart(5, '0')}`);
          return claims(n, all, ['new00001']);
        };
        for (const k of [2, 5, 10]) {
          const [r1, runtimeMs] = await passWith(make(1_000_000), moveMore(k));
          const [r2, txMs] = await passWith(make(0), moveMore(k));
          if (r1.ops !== k || r2.ops !== k)
            throw new Error(`expected ${k} moves, planned ${r1.ops} and ${r2.ops}`);
          const line = `N=${n} K=${k}: runtime path ${runtimeMs} ms, one transaction ${txMs} ms`;
          rows.push(line);
          console.log(line);
        }
      }
    } finally {
      await tb.stop();
    }
  }
  console.log(`\nHAProxy ${version}, one run each, times in ms (pass = read + plan + apply)\n`);
  console.log(
    '| N | cold read | cached read | pass, nothing to do | pass, one new cluster | pass, one endpoint move |',
  );
  console.log('| --- | --- | --- | --- | --- | --- |');
  for (const r of rows) console.log(r);
}

await main();
