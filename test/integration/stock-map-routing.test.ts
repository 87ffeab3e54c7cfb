import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { DEFAULT_RENDER_OPTIONS, type RenderOptions, renderDesired } from '../../src/haproxy/render.js';
import { type Plan, plan } from '../../src/plan/plan.js';
import { parseMapFile } from '../../src/providers/haproxy/map-file.js';
import { parseOwnedFile } from '../../src/providers/haproxy/owned-file-parse.js';
import type { StockHaproxyProvider } from '../../src/providers/haproxy/provider.js';
import { parseShowProc } from '../../src/providers/haproxy/runtime-text.js';
import { type RouteClaim as Claim, resolveRoutes } from '../../src/routes/route.js';
import { type HaproxyTestbed, haproxyVersionUnderTest } from '../support/haproxy-testbed.js';
import { interpret } from '../support/owner.js';
import { type StockMapBed, startStockMapBed, stockProviderFor } from '../support/stock-haproxy.js';
import { type NamedTlsServer, sniProbe } from '../support/tls.js';
import { waitFor } from '../support/wait.js';

const version = haproxyVersionUnderTest();
const signal = () => AbortSignal.timeout(60_000);

// Map routing on a real HAProxy: routes come and go through the runtime API (servers in a slot, then an
// SNI map entry) with no reload, the files follow, and a reload by anyone afterwards keeps every route.
describe(`haproxy provider, map routing, on HAProxy ${version}`, () => {
  let haproxy: HaproxyTestbed;
  let provider: StockHaproxyProvider;
  let render: RenderOptions;
  let a: NamedTlsServer;
  let b: NamedTlsServer;
  let port: number;
  let dir: string;

  const mapFile = () => join(dir, DEFAULT_RENDER_OPTIONS.sniMap);
  const reloads = async () => parseShowProc(await haproxy.masterCli('show proc')).reloads;
  const planFor = async (claims: Claim[], options = render): Promise<Plan> =>
    plan(
      renderDesired(resolveRoutes(claims).routes, options),
      interpret(await provider.readState(signal())),
      {
        grow: 'when_needed',
      },
    );
  const claim = (cluster: string, port: number): Claim => ({
    cluster,
    host: `api.${cluster}.example.com`,
    endpoints: [{ address: '127.0.0.1', port }],
    claimedAt: 0,
  });
  /** Plans, applies and checks convergence; `ms` is the apply alone. */
  const converge = async (claims: Claim[], options = render) => {
    const current = await provider.readState(signal());
    const p = plan(renderDesired(resolveRoutes(claims).routes, options), interpret(current), {
      grow: 'when_needed',
    });
    const started = performance.now();
    const report = await provider.apply(p, current, signal());
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
    ({ haproxy, provider, a, b, port, render } = bed);
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
    const token = await provider.revision(signal());
    expect(token).toMatch(/^[0-9]+:[0-9]+:[0-9]+$/);
    const cached = await provider.readState(signal());
    expect(await provider.readState(signal())).toBe(cached);
    expect(await provider.readState(signal(), { fresh: true })).not.toBe(cached);
    // A map entry deleted by hand at runtime: a fresh read sees it (a cached one may not).
    await haproxy.masterCli(`@1 del map ${mapFile()} api.x.example.com`);
    const fresh = interpret(await provider.readState(signal(), { fresh: true }));
    expect(fresh.maps?.[0]?.entries.size).toBe(0);
    const repair = await converge([claim('x', a.port)]);
    expect(repair.plan.operations.map((o) => o.kind)).toEqual(['set_map_entry']);
    expect(repair.report.reload).toBe('none');
    await reaches('x', 'a');
    await haproxy.masterCli('reload');
    await waitFor(() => provider.revision(signal()), 10_000, 'a new revision', { ok: (t) => t !== token });
    expect(await provider.readState(signal())).not.toBe(cached);
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
    const state = interpret(await restarted.readState(signal()));
    // The runtime server counts as ours, so the route is taken back as it is: nothing to plan.
    expect(state.backends.find((x) => x.name === slot)?.servers).toEqual([
      expect.objectContaining({ port: b.port, owned: true }),
    ]);
    expect(persisted().map.get('api.y.example.com')).toBe(slot);
    expect(persisted().servers).toContainEqual([slot, [b.port]]);
    const before = await reloads();
    await haproxy.masterCli('reload');
    await waitFor(reloads, 10_000, 'the reload', { ok: (n) => n > before });
    await reaches('y', 'b');
    await reaches('x', 'a');
  });

  it('moves an install from per-route rules to the map in one reload, every route answering', async () => {
    const rules = { ...render, routing: 'rules' as const };
    const claims = [claim('p', a.port), claim('q', b.port)];
    await converge(claims, rules);
    await reaches('p', 'a');
    const before = await reloads();
    const upgrade = await converge(claims);
    expect(upgrade.report.reload).toBe('succeeded');
    expect(await reloads()).toBe(before + 1);
    await reaches('p', 'a');
    await reaches('q', 'b');
    const file = readFileSync(haproxy.owned?.path ?? '', 'utf8');
    expect(file).toContain(`use_backend %[req.ssl_sni,lower,map(${mapFile()})]`);
    expect(file).not.toContain('req.ssl_sni -i');
    expect([...parseMapFile(readFileSync(mapFile(), 'utf8')).keys()]).toEqual([
      'api.p.example.com',
      'api.q.example.com',
    ]);
  });
});
