import { readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { DEFAULT_RENDER_OPTIONS, type RenderOptions, renderDesired } from '../../src/haproxy/render.js';
import { type Plan, plan } from '../../src/plan/plan.js';
import { parseMapFile } from '../../src/providers/haproxy/map-file.js';
import { parseOwnedFile } from '../../src/providers/haproxy/owned-file-parse.js';
import type { StockHaproxyProvider } from '../../src/providers/haproxy/provider.js';
import { parseShowProc } from '../../src/providers/haproxy/runtime-text.js';
import type { OwnedProvider } from '../../src/registry/owned-provider.js';
import { type RouteClaim as Claim, resolveRoutes } from '../../src/routes/route.js';
import { type HaproxyTestbed, haproxyVersionUnderTest } from '../support/haproxy-testbed.js';
import { LEGACY_FIXTURE_ROUTES, legacyRulesFile } from '../support/legacy-stock-file.js';
import { registry } from '../support/owner.js';
import { startSniProber } from '../support/sni-prober.js';
import { ownedBy, type StockMapBed, startStockMapBed, stockProviderFor } from '../support/stock-haproxy.js';
import { type NamedTlsServer, sniProbe } from '../support/tls.js';
import { waitFor } from '../support/wait.js';

const version = haproxyVersionUnderTest();
const signal = () => AbortSignal.timeout(60_000);
const FIXTURES = join(import.meta.dirname, '../fixtures/legacy-rules');

// Map routing on a real HAProxy: routes come and go through the runtime API (servers in a slot, then an
// SNI map entry) with no reload, the files follow, and a reload by anyone afterwards keeps every route.
describe(`haproxy provider, map routing, on HAProxy ${version}`, () => {
  let haproxy: HaproxyTestbed;
  let provider: StockHaproxyProvider;
  let owned: OwnedProvider;
  let render: RenderOptions;
  let a: NamedTlsServer;
  let b: NamedTlsServer;
  let port: number;
  let dir: string;

  const mapFile = () => join(dir, DEFAULT_RENDER_OPTIONS.sniMap);
  const reloads = async () => parseShowProc(await haproxy.masterCli('show proc')).reloads;
  const planFor = async (claims: Claim[], options = render): Promise<Plan> =>
    plan(renderDesired(resolveRoutes(claims).routes, options), (await owned.read(signal())).state, {
      grow: 'when_needed',
    });
  const claim = (cluster: string, port: number): Claim => ({
    cluster,
    host: `api.${cluster}.example.com`,
    endpoints: [{ address: '127.0.0.1', port }],
    claimedAt: 0,
  });
  /** Plans, applies and checks convergence; `ms` is the apply alone. */
  const converge = async (claims: Claim[], options = render) => {
    const current = await owned.read(signal());
    const p = plan(renderDesired(resolveRoutes(claims).routes, options), current.state, {
      grow: 'when_needed',
    });
    const started = performance.now();
    const report = await owned.apply(p, current, signal());
    const ms = performance.now() - started;
    expect((await planFor(claims, options)).operations).toEqual([]);
    return { plan: p, report, ms };
  };
  const reaches = (cluster: string, server: string) =>
    waitFor(() => sniProbe(port, `api.${cluster}.example.com`), 2_000, `${cluster} to reach ${server}`, {
      ok: (r) => 'reached' in r && r.reached === server,
      everyMs: 20,
    });
  const persisted = () => ({
    map: parseMapFile(readFileSync(mapFile(), 'utf8')),
    servers: parseOwnedFile(readFileSync(haproxy.owned?.path ?? '', 'utf8'), undefined, dir)
      .state.backends.filter((x) => x.servers.length > 0)
      .map((x) => [x.name, x.servers.map((s) => s.port)]),
  });

  let bed: StockMapBed | undefined;
  beforeAll(async () => {
    bed = await startStockMapBed(version, 8);
    ({ haproxy, provider, owned, a, b, port, render } = bed);
    dir = haproxy.dir;
  });
  afterAll(() => bed?.close());
  beforeEach(async () => {
    await provider.flush();
    await haproxy.owned?.reloadWith('');
  });

  it('adds, moves and deletes routes with no reload; the files follow; a reload by anyone keeps them', async () => {
    const first = await converge([claim('x', a.port)]);
    expect(first.report.reload).toBe('succeeded');
    await reaches('x', 'a');
    const before = await reloads();

    const added = await converge([claim('x', a.port), claim('y', b.port)]);
    expect(added.plan.operations.map((o) => o.kind)).toEqual(['create_server', 'set_map_entry']);
    expect(added.report.reload).toBe('none');
    expect(await sniProbe(port, 'api.y.example.com')).toEqual({ reached: 'b' });
    expect(await sniProbe(port, 'API.Y.example.com')).toEqual({ reached: 'b' });

    const moved = await converge([claim('x', b.port), claim('y', b.port)]);
    expect(moved.plan.operations.map((o) => o.kind)).toEqual(['update_server']);
    expect(await sniProbe(port, 'api.x.example.com')).toEqual({ reached: 'b' });

    const deleted = await converge([claim('x', b.port)]);
    expect(deleted.plan.operations.map((o) => o.kind)).toEqual(['delete_map_entry', 'delete_server']);
    expect(await sniProbe(port, 'api.y.example.com')).toMatchObject({ failed: expect.any(String) });
    expect(await reloads()).toBe(before);

    // Persistence, off the apply's path: within about a second the files say what runs.
    await waitFor(() => JSON.stringify(persisted()), 3_000, 'the files to hold the routes', {
      ok: (t) =>
        t ===
        JSON.stringify({
          map: new Map([['api.x.example.com', 'kubebyon_slot_00001']]),
          servers: [['kubebyon_slot_00001', [b.port]]],
        }),
    });
    expect(persisted().map).toEqual(new Map([['api.x.example.com', 'kubebyon_slot_00001']]));

    // Someone else reloads HAProxy: the new worker loads the files, and the route is still there.
    await haproxy.masterCli('reload');
    await waitFor(reloads, 10_000, 'the reload', { ok: (n) => n > before });
    await reaches('x', 'b');
    expect(await sniProbe(port, 'api.y.example.com')).toMatchObject({ failed: expect.any(String) });
    expect((await planFor([claim('x', b.port)])).operations).toEqual([]);
  });

  it('answers a read from what it knows while nothing else changed, and reads all again after a reload', async () => {
    await converge([claim('x', a.port)]);
    // reloads:worker:start:foreign edits of the owned file
    const token = await provider.revision(signal());
    expect(token).toMatch(/^[0-9]+:[0-9]+:[0-9]+:[0-9]+$/);
    const cached = await owned.read(signal());
    expect(await owned.read(signal())).toBe(cached);
    expect(await owned.read(signal(), { fresh: true })).not.toBe(cached);
    // A map entry deleted by hand at runtime: a fresh read sees it (a kept one may not).
    await haproxy.masterCli(`@1 del map ${mapFile()} api.x.example.com`);
    const fresh = (await owned.read(signal(), { fresh: true })).state;
    expect(fresh.maps?.[0]?.entries.size).toBe(0);
    const repair = await converge([claim('x', a.port)]);
    expect(repair.plan.operations.map((o) => o.kind)).toEqual(['set_map_entry']);
    expect(repair.report.reload).toBe('none');
    await reaches('x', 'a');
    await haproxy.masterCli('reload');
    await waitFor(() => provider.revision(signal()), 10_000, 'a new revision', { ok: (t) => t !== token });
    expect(await owned.read(signal())).not.toBe(cached);
  });

  it('never has its own reload taken for someone else’s: a revision read meanwhile answers once the apply is done', async () => {
    await converge([claim('x', a.port)]);
    const before = await provider.revision(signal());
    // A change of the frontend: a reload. The revision watch polls HAProxy all along (every 500 ms).
    const current = await owned.read(signal());
    const p = plan(
      renderDesired(resolveRoutes([claim('x', a.port)]).routes, { ...render, inspectDelayMs: 4000 }),
      current.state,
    );
    expect(p.operations.map((o) => o.kind)).toEqual(['update_frontend']);
    let done = false;
    const applying = owned.apply(p, current, signal()).finally(() => {
      done = true;
    });
    const seen: Array<{ token: string; ours: boolean }> = [];
    for (let i = 0; i < 2_000 && !done; i++) {
      const token = await provider.revision(signal());
      // What the watch asks the moment it has a token: is it the one before, or this service's own?
      seen.push({ token, ours: owned.isOwnRevision(token) });
    }
    const report = await applying;
    expect(report.reload).toBe('succeeded');
    expect(report.revision).not.toBe(before);
    expect(seen.filter((x) => x.token !== before && !x.ours)).toEqual([]);
    expect(seen.at(-1)).toEqual({ token: report.revision, ours: true });
  });

  it('runtime changes applied while a persistence writes the file: no change after them is refused', async () => {
    const all = (port: number) => Array.from({ length: 40 }, (_, k) => claim(`r${k}`, port));
    const move = async (port: number) => {
      const current = await owned.read(signal());
      const p = plan(renderDesired(resolveRoutes(all(port)).routes, render), current.state);
      await owned.apply(p, current, signal());
    };
    await converge(all(a.port));
    // While the batch of the last changes is written, a change made from a reading taken before (every other
    // time it changes nothing, so the next read is a full one) and one made after: the file gets a new text
    // under them. An apply used to keep the text it began with, and a full read the text it read before the
    // write; either way the persistence after took the file for someone else's and dropped all it knew, and
    // the next change was refused (a full pass, 0.9 s at 20000 in `bench/zero-reload.ts`'s burst).
    for (let i = 1; i <= 7; i++) {
      const current = await owned.read(signal());
      const flushing = provider.flush();
      const to = i % 2 === 1 ? b.port : a.port;
      await owned.apply(
        plan(renderDesired(resolveRoutes(all(to)).routes, render), current.state),
        current,
        signal(),
      );
      await move(i % 2 === 1 ? a.port : b.port);
      await flushing;
    }
    await provider.flush();
    expect(new Set(persisted().servers.map(([, ports]) => String(ports)))).toEqual(new Set([String(a.port)]));
    await reaches('r0', 'a');
  });

  it('a reload by someone else right after a runtime change loses nothing once the next pass has run', async () => {
    await converge([claim('x', a.port)]);
    const before = await reloads();
    const added = await converge([claim('x', a.port), claim('y', b.port)]);
    expect(added.report.reload).toBe('none');
    // Before the files follow (~100 ms later): the new worker loads files that may lack the route.
    await haproxy.masterCli('reload');
    await waitFor(reloads, 10_000, 'the reload', { ok: (n) => n > before });
    // The next pass (an ordinary read: the provider sees the new worker by itself) puts back what is missing.
    await converge([claim('x', a.port), claim('y', b.port)]);
    await reaches('y', 'b');
    await reaches('x', 'a');
    await waitFor(() => persisted().map.get('api.y.example.com'), 3_000, 'the map file to hold y');
  });

  it('a runtime line that fails is undone and applied by a reload instead', async () => {
    await converge([claim('x', a.port)]);
    // Behind the provider's back (its cached read does not see it): the slot the next route takes gets a
    // server of the same name, so `add server` fails in the middle of the route's line.
    await haproxy.masterCli(`@1 add server kubebyon_slot_00002/srv1 127.0.0.1:${a.port}`);
    const before = await reloads();
    const added = await converge([claim('x', a.port), claim('y', b.port)]);
    expect(added.plan.operations.map((o) => o.kind)).toEqual(['create_server', 'set_map_entry']);
    expect(added.report.reload).toBe('succeeded');
    expect(await reloads()).toBe(before + 1);
    await reaches('y', 'b');
    await reaches('x', 'a');
  });

  it('after a crash between a runtime change and its persistence, the next read writes the files', async () => {
    await converge([claim('x', a.port)]);
    await provider.flush();
    // What a service killed right after its runtime commands leaves: the route runs, the files lack it.
    const slot = 'kubebyon_slot_00002';
    await haproxy.masterCli(`@1 add server ${slot}/srv1 127.0.0.1:${b.port}`);
    await haproxy.masterCli(`@1 enable server ${slot}/srv1`);
    await haproxy.masterCli(`@1 add map ${mapFile()} api.y.example.com ${slot}`);
    await reaches('y', 'b');
    expect(persisted().map.has('api.y.example.com')).toBe(false);
    const restarted = stockProviderFor(haproxy);
    try {
      // A full read settles: the files are brought in line with what runs before the read is answered.
      const { state } = await ownedBy(restarted).read(signal());
      // The untagged runtime server in a slot of ours is ours, so the route is taken back as it is.
      expect(state.backends.find((x) => x.name === slot)?.servers).toEqual([
        expect.objectContaining({ port: b.port, owned: true }),
      ]);
      expect(persisted().map.get('api.y.example.com')).toBe(slot);
      expect(persisted().servers).toContainEqual([slot, [b.port]]);
    } finally {
      await restarted.close();
    }
    const before = await reloads();
    await haproxy.masterCli('reload');
    await waitFor(reloads, 10_000, 'the reload', { ok: (n) => n > before });
    await reaches('y', 'b');
    await reaches('x', 'a');
  });

  it('rebuilds the owned file of the release before map routing (rules) byte for byte', () => {
    for (const [healthChecks, fixture] of [
      [false, 'owned-file.cfg'],
      [true, 'owned-file-checks.cfg'],
    ] as const) {
      const text = legacyRulesFile(LEGACY_FIXTURE_ROUTES, {
        owner: registry,
        bind: { address: '127.0.0.1', port: 4443 },
        healthChecks,
        mapDir: '/etc/kubebyon',
      });
      expect(text).toBe(readFileSync(join(FIXTURES, fixture), 'utf8'));
    }
  });

  it('takes over an install of the release before map routing (rules) in one reload: every route answers throughout, then the files hold the map only', async () => {
    // What the previous release left with KUBEBYON_HAPROXY_ROUTING=rules: one backend and one SNI rule per
    // cluster in its owned file, no map; HAProxy runs it.
    const n = 24;
    const clusters = Array.from({ length: n }, (_, i) => `u${i}`);
    const serverOf = (i: number) => (i % 2 === 0 ? a : b);
    const routes = clusters.map((cluster, i) => ({
      cluster,
      host: `api.${cluster}.example.com`,
      endpoints: [{ address: '127.0.0.1', port: serverOf(i).port }],
    }));
    const legacy = legacyRulesFile(routes, {
      owner: registry,
      bind: render.bind,
      healthChecks: false,
      mapDir: dir,
    });
    expect(legacy).toMatch(
      /use_backend kubebyon_u0_[0-9a-f]{12} if \{ req\.ssl_sni -i api\.u0\.example\.com \}/,
    );
    rmSync(mapFile(), { force: true });
    await haproxy.owned?.reloadWith(legacy);
    for (const [i, cluster] of clusters.entries()) await reaches(cluster, serverOf(i).name);

    // Real TLS handshakes carrying each cluster's SNI, round after round, from before the new service reads
    // HAProxy until after its files are written: not one may fail.
    const expected = new Map(routes.map((r, i) => [r.host, serverOf(i).name]));
    const prober = startSniProber(
      routes.map((r) => r.host),
      async (host) => {
        const r = await sniProbe(port, host);
        return 'reached' in r && r.reached === expected.get(host) ? undefined : JSON.stringify(r);
      },
    );
    const successor = stockProviderFor(haproxy);
    let during = 0;
    try {
      await prober.roundsFromNow(3);
      const before = await reloads();
      // The new service: a provider that shares nothing with the one before, its first (fresh) read.
      const next = ownedBy(successor);
      const current = await next.read(signal(), { fresh: true });
      expect(current.state.backends.filter((x) => x.owned && x.cluster !== undefined)).toHaveLength(n);
      expect(current.state.frontends.find((f) => f.name === render.frontendName)?.rules).toHaveLength(n);
      const claims = routes.map((r) => ({ ...r, endpoints: [...r.endpoints], claimedAt: 0 }));
      const desired = renderDesired(resolveRoutes(claims).routes, render);
      const p = plan(desired, current.state);
      const rounds = prober.rounds;
      const report = await next.apply(p, current, signal());
      during = prober.rounds - rounds;
      expect(report.reload).toBe('succeeded');
      expect(await reloads()).toBe(before + 1);
      expect(plan(desired, (await next.read(signal())).state).operations).toEqual([]);
      expect(plan(desired, (await next.read(signal(), { fresh: true })).state).operations).toEqual([]);
      await successor.flush();
      await prober.roundsFromNow(5);
    } finally {
      await successor.close();
    }
    const probed = await prober.stop();
    console.log(JSON.stringify({ upgrade: { version, clusters: n, ...probed, roundsDuringApply: during } }));
    expect(probed.failures).toEqual([]);
    expect(during).toBeGreaterThan(0);

    // Afterwards the owned file holds the map layout only: the frontend routes by the map, no rule and no
    // per-cluster backend is left, and the map file names a slot for every host.
    const file = readFileSync(haproxy.owned?.path ?? '', 'utf8');
    expect(file).toContain(`use_backend %[req.ssl_sni,lower,map(${mapFile()})]`);
    expect(file).not.toContain('req.ssl_sni -i');
    const parsed = parseOwnedFile(file, undefined, dir).state;
    expect(parsed.frontends.map((f) => [f.name, f.rules.length, f.sniMap])).toEqual([
      [render.frontendName, 0, DEFAULT_RENDER_OPTIONS.sniMap],
    ]);
    // The slots, and the refusals table's backend (authorized networks).
    expect(
      parsed.backends.every(
        (x) => /^kubebyon_slot_[0-9]{5,}$/.test(x.name) || x.name === 'kubebyon_refusals',
      ),
    ).toBe(true);
    const map = parseMapFile(readFileSync(mapFile(), 'utf8'));
    expect([...map.keys()].sort()).toEqual(routes.map((r) => r.host).sort());
    for (const [host, slot] of map) {
      const i = clusters.indexOf(/^api\.(u[0-9]+)\./.exec(host)?.[1] ?? '');
      expect(parsed.backends.find((x) => x.name === slot)?.servers.map((s) => s.port)).toEqual([
        serverOf(i).port,
      ]);
    }
    // What the files say is what a reload by anyone brings back.
    const loaded = await reloads();
    await haproxy.masterCli('reload');
    await waitFor(reloads, 10_000, 'the reload', { ok: (r) => r > loaded });
    for (const [i, cluster] of clusters.entries()) await reaches(cluster, serverOf(i).name);
  }, 120_000);
});
