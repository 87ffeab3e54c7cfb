import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type RenderOptions, renderDesired } from '../../src/haproxy/render.js';
import { plan } from '../../src/plan/plan.js';
import type { StockHaproxyProvider } from '../../src/providers/haproxy/provider.js';
import { parseShowProc } from '../../src/providers/haproxy/runtime-text.js';
import type { OwnedProvider } from '../../src/registry/owned-provider.js';
import { type RouteClaim as Claim, resolveRoutes } from '../../src/routes/route.js';
import { type HaproxyTestbed, haproxyVersionUnderTest } from '../support/haproxy-testbed.js';
import { type StockMapBed, startStockMapBed } from '../support/stock-haproxy.js';
import { type NamedTlsServer, sniProbe } from '../support/tls.js';

const version = haproxyVersionUnderTest();
/** Routes already there (KUBEBYON_TEST_MAP_ROUTES, default 1000). */
const N = Number(process.env.KUBEBYON_TEST_MAP_ROUTES ?? 1000);
const signal = () => AbortSignal.timeout(120_000);

// One route added, moved and deleted on top of N through map routing on a real HAProxy: no reload, the read
// answered from what the provider knows, and how long each part takes (logged, for the numbers).
describe(`haproxy provider, map routing at N=${N}, HAProxy ${version}`, () => {
  let haproxy: HaproxyTestbed;
  let provider: StockHaproxyProvider;
  let owned: OwnedProvider;
  let render: RenderOptions;
  let a: NamedTlsServer;
  let b: NamedTlsServer;
  let port: number;
  const claim = (n: number, p: number): Claim => ({
    cluster: `c${n}`,
    host: `api.c${n}.example.com`,
    endpoints: [{ address: '127.0.0.1', port: p }],
    claimedAt: 0,
  });
  const timed = async <T>(f: () => Promise<T>): Promise<[T, number]> => {
    const started = performance.now();
    const value = await f();
    return [value, Math.round((performance.now() - started) * 10) / 10];
  };
  /** One pass as the service runs it: read (the kept reading unless fresh), plan, apply. */
  const pass = async (claims: Claim[], fresh = false) => {
    const [current, readMs] = await timed(() => owned.read(signal(), { fresh }));
    const [p, planMs] = await timed(async () =>
      plan(renderDesired(resolveRoutes(claims).routes, render), current.state, { grow: 'when_needed' }),
    );
    const [report, applyMs] = await timed(() => owned.apply(p, current, signal()));
    const [, persistMs] = await timed(() => provider.flush());
    return { ops: p.operations.length, report, readMs, planMs, applyMs, persistMs };
  };
  const reloads = async () => parseShowProc(await haproxy.masterCli('show proc')).reloads;

  let bed: StockMapBed | undefined;
  beforeAll(async () => {
    bed = await startStockMapBed(version);
    ({ haproxy, provider, owned, a, b, port, render } = bed);
  }, 60_000);
  afterAll(() => bed?.close());

  it('adds, moves and deletes one route among N with no reload', async () => {
    const claims = Array.from({ length: N }, (_, i) => claim(i + 1, a.port));
    const start = await pass(claims, true);
    expect(start.report.reload).toBe('succeeded');
    const before = await reloads();
    const fresh = await timed(() => owned.read(signal(), { fresh: true }));
    // A few single adds first (each added then deleted), for a median beside the one reported in full.
    const adds: number[] = [];
    for (let k = 0; k < 5; k++) {
      adds.push((await pass([...claims, claim(N + 2 + k, a.port)])).applyMs);
      await pass(claims);
    }
    const added = await pass([...claims, claim(N + 1, a.port)]);
    expect(await sniProbe(port, `api.c${N + 1}.example.com`)).toEqual({ reached: 'a' });
    const moved = await pass([...claims, claim(N + 1, b.port)]);
    expect(moved.ops).toBe(1);
    expect(await sniProbe(port, `api.c${N + 1}.example.com`)).toEqual({ reached: 'b' });
    const deleted = await pass(claims);
    expect([added, moved, deleted].map((x) => x.report.reload)).toEqual(['none', 'none', 'none']);
    expect(await reloads()).toBe(before);
    console.log(
      JSON.stringify({
        N,
        version,
        startMs: start.applyMs,
        freshReadMs: fresh[1],
        addApplyMs: adds.sort((x, y) => x - y),
        added,
        moved,
        deleted,
      }),
    );
  }, 600_000);
});
