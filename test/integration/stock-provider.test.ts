import { readFileSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import pino from 'pino';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { DEFAULT_RENDER_OPTIONS, type RenderOptions, renderDesired } from '../../src/haproxy/render.js';
import { ReloadFailedError, TerminalError } from '../../src/model/errors.js';
import { type Operation, type Plan, plan } from '../../src/plan/plan.js';
import { mapPath, parseMapFile, renderMapFile } from '../../src/providers/haproxy/map-file.js';
import { renderOwnedFile } from '../../src/providers/haproxy/owned-file.js';
import { parseOwnedFile } from '../../src/providers/haproxy/owned-file-parse.js';
import { StockHaproxyProvider } from '../../src/providers/haproxy/provider.js';
import type { OwnedProvider } from '../../src/registry/owned-provider.js';
import { type RouteClaim as Claim, resolveRoutes } from '../../src/routes/route.js';
import {
  type HaproxyTestbed,
  haproxyVersionUnderTest,
  startHaproxyTestbed,
} from '../support/haproxy-testbed.js';
import { registry } from '../support/owner.js';
import { freeLoopbackPort } from '../support/ports.js';
import { operatorConfig, ownedBy, stockConfigFor, stockProviderFor } from '../support/stock-haproxy.js';
import { type NamedTlsServer, sniProbe, startNamedTlsServer } from '../support/tls.js';
import { waitFor } from '../support/wait.js';

const version = haproxyVersionUnderTest();
const signal = () => AbortSignal.timeout(60_000);

// The stock-HAProxy provider's own promises, on a real HAProxy: endpoint moves without reloads, refused
// configurations that change nothing, reload failures with HAProxy's words, and drift read back. Map routing
// (the only layout); what is particular to the map and its slots is in stock-map-routing.test.ts.
describe(`haproxy provider on HAProxy ${version}`, () => {
  let haproxy: HaproxyTestbed;
  let provider: StockHaproxyProvider;
  let owned: OwnedProvider;
  let render: RenderOptions;
  let a: NamedTlsServer;
  let b: NamedTlsServer;
  let c: NamedTlsServer;
  let port: number;
  let ownedPath: string;

  const read = async (fresh = false) => (await owned.read(signal(), { fresh })).state;
  const planFor = async (claims: Claim[], options = render): Promise<Plan> =>
    plan(renderDesired(resolveRoutes(claims).routes, options), await read());
  const claim = (cluster: string, host: string, ...ports: number[]): Claim => ({
    cluster,
    host,
    endpoints: ports.map((p) => ({ address: '127.0.0.1', port: p })),
    claimedAt: 0,
  });
  const converge = async (claims: Claim[], options = render) => {
    const current = await owned.read(signal());
    const p = plan(renderDesired(resolveRoutes(claims).routes, options), current.state);
    const report = await owned.apply(p, current, signal());
    expect((await planFor(claims, options)).operations).toEqual([]);
    return { plan: p, report };
  };
  /** The plan for `claims`, each operation passed through `change` (a hand-made plan), and its reading. */
  const handMade = async (claims: Claim[], change: (op: Operation) => Operation, options = render) => {
    const current = await owned.read(signal());
    const p = plan(renderDesired(resolveRoutes(claims).routes, options), current.state);
    return { current, plan: { operations: p.operations.map(change), conflicts: [] } as Plan };
  };
  const kinds = (p: Plan) => p.operations.map((o) => o.kind);
  const ownedFileState = () => parseOwnedFile(readFileSync(ownedPath, 'utf8'), undefined, haproxy.dir).state;
  const mapFile = () => mapPath(haproxy.dir, DEFAULT_RENDER_OPTIONS.sniMap);

  beforeAll(async () => {
    [a, b, c] = await Promise.all([
      startNamedTlsServer('a'),
      startNamedTlsServer('b'),
      startNamedTlsServer('c'),
    ]);
    port = await freeLoopbackPort();
    haproxy = await startHaproxyTestbed(
      operatorConfig(await freeLoopbackPort(), await freeLoopbackPort()),
      version,
      { ownedFile: true },
    );
    ownedPath = haproxy.owned?.path ?? '';
    provider = stockProviderFor(haproxy);
    owned = ownedBy(provider);
    // A small pool: the cases here are about servers, the frontend and reloads, not about the pool's size.
    render = {
      ...DEFAULT_RENDER_OPTIONS,
      minSlots: 4,
      bind: { address: '127.0.0.1', port },
      healthChecks: false,
    };
  });
  afterAll(async () => {
    await provider?.close();
    await haproxy?.stop();
    await Promise.all([a?.close(), b?.close(), c?.close()]);
  });
  beforeEach(async () => {
    await provider.flush();
    await haproxy.owned?.reloadWith('');
  });

  it('reports the HAProxy version and the master socket', async () => {
    const info = await provider.ping(signal());
    expect(info.version).toMatch(new RegExp(`^HAProxy ${version.replace('.', '\\.')}\\.`));
    expect(info.endpoint).toBe(haproxy.owned?.masterSocket);
  });

  it('reads through the moments after a reload, when the master re-executes itself', async () => {
    // Without retries a read right after "Loading success" hit a reset connection within a few rounds (2.6).
    for (let i = 0; i < 20; i++) {
      await haproxy.owned?.reloadWith('');
      await provider.read(signal());
      await provider.ping(signal());
    }
  });

  it('creates the first route with one reload, then moves, adds and removes endpoints with none', async () => {
    const loads = await haproxy.loads();
    const first = await converge([claim('x', 'x.example.com', a.port)]);
    expect(first.report.reload).toBe('succeeded');
    expect(await haproxy.loads()).toBe(loads + 1);
    expect(await sniProbe(port, 'x.example.com')).toEqual({ reached: 'a' });

    const moved = await converge([claim('x', 'x.example.com', b.port)]);
    expect(kinds(moved.plan)).toEqual(['update_server']);
    expect(moved.report).toEqual({
      reload: 'none',
      requests: expect.any(Number),
      revision: expect.any(String),
    });
    expect(await sniProbe(port, 'x.example.com')).toEqual({ reached: 'b' });

    // Two endpoints, then back to one: a runtime add and a runtime delete.
    const added = await converge([claim('x', 'x.example.com', b.port, c.port)]);
    expect(kinds(added.plan)).toEqual(['create_server']);
    expect(added.report.reload).toBe('none');
    const seen = new Set<string>();
    for (let i = 0; i < 20 && seen.size < 2; i++) {
      const r = await sniProbe(port, 'x.example.com');
      if ('reached' in r) seen.add(r.reached);
    }
    expect([...seen].sort()).toEqual(['b', 'c']);
    const removed = await converge([claim('x', 'x.example.com', c.port)]);
    expect(kinds(removed.plan)).toEqual(['delete_server']);
    expect(removed.report.reload).toBe('none');
    for (let i = 0; i < 5; i++) expect(await sniProbe(port, 'x.example.com')).toEqual({ reached: 'c' });

    expect(await haproxy.loads()).toBe(loads + 1);
    // The owned file follows shortly (batched, off the apply's path), so that the next reload or restart
    // agrees with the runtime.
    const ports = () =>
      ownedFileState()
        .backends.filter((x) => x.servers.length > 0)
        .map((x) => x.servers.map((s) => s.port));
    await waitFor(
      () => JSON.stringify(ports()) === JSON.stringify([[c.port]]),
      3_000,
      'the owned file to follow',
    );
  });

  it('moves 250 endpoints with no reload, many address changes to a master-CLI line', async () => {
    const names = Array.from({ length: 250 }, (_, i) => `m${i}`);
    await converge(names.map((n) => claim(n, `${n}.example.com`, a.port)));
    const loads = await haproxy.loads();
    const { plan: p, report } = await converge(names.map((n) => claim(n, `${n}.example.com`, b.port)));
    expect(p.operations.filter((o) => o.kind === 'update_server')).toHaveLength(250);
    expect(p.operations).toHaveLength(250);
    expect(report.reload).toBe('none');
    // Every command counts, though they went three lines to the master.
    expect(report.requests).toBeGreaterThanOrEqual(250);
    for (const n of ['m0', 'm99', 'm100', 'm249'])
      expect(await sniProbe(port, `${n}.example.com`)).toEqual({ reached: 'b' });
    await sleep(500);
    expect(await haproxy.loads()).toBe(loads);
    // The files say the same: a fresh provider finds nothing to do.
    await provider.flush();
    const fresh = stockProviderFor(haproxy);
    try {
      const { state } = await ownedBy(fresh).read(signal());
      const want = renderDesired(
        resolveRoutes(names.map((n) => claim(n, `${n}.example.com`, b.port))).routes,
        render,
      );
      expect(plan(want, state).operations).toEqual([]);
    } finally {
      await fresh.close();
    }
  });

  it('falls back to a reload to add a server to a slot whose algorithm the runtime cannot extend (source)', async () => {
    // Slots made while KUBEBYON_HAPROXY_BALANCE was a setting keep their algorithm: under `source` HAProxy
    // cannot add a server at runtime.
    const source = { ...render, balance: 'source' as const };
    await converge([claim('x', 'x.example.com', a.port)], source);
    expect(ownedFileState().backends.every((x) => x.balance === 'source' || x.table)).toBe(true);
    const loads = await haproxy.loads();
    const { plan: p, report } = await converge([claim('x', 'x.example.com', a.port, b.port)], source);
    expect(kinds(p)).toEqual(['create_server']);
    expect(report.reload).toBe('succeeded');
    expect(await haproxy.loads()).toBe(loads + 1);
  });

  it('leaves the running configuration and the owned file as they were when HAProxy refuses the new one', async () => {
    await converge([claim('x', 'x.example.com', a.port)]);
    await provider.flush();
    const before = readFileSync(ownedPath);
    const loads = await haproxy.loads();
    // The planner never points at a missing backend; a hand-made operation does, and `haproxy -c` refuses it.
    const { current, plan: bad } = await handMade(
      [claim('x', 'x.example.com', a.port)],
      (op) =>
        op.kind === 'update_frontend'
          ? { ...op, frontend: { ...op.frontend, defaultBackend: 'no_such_backend' } }
          : op,
      { ...render, defaultBackend: 'console' },
    );
    expect(kinds(bad)).toEqual(['update_frontend']);
    const error = await owned.apply(bad, current, signal()).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(TerminalError);
    expect(String(error)).toMatch(/no_such_backend/);
    expect(readFileSync(ownedPath)).toEqual(before);
    expect(await haproxy.loads()).toBe(loads);
    expect(await sniProbe(port, 'x.example.com')).toEqual({ reached: 'a' });
  });

  it('refuses a host that could inject a map entry, before writing anything', async () => {
    await converge([claim('x', 'x.example.com', a.port)]);
    await provider.flush();
    const before = { file: readFileSync(ownedPath), map: readFileSync(mapFile()) };
    const { current, plan: evil } = await handMade([claim('y', 'y.example.com', b.port)], (op) =>
      op.kind === 'set_map_entry' ? { ...op, host: 'y.example.com kubebyon_slot_00001\nz.example.com' } : op,
    );
    expect(kinds(evil)).toContain('set_map_entry');
    await expect(owned.apply(evil, current, signal())).rejects.toThrow(TerminalError);
    await provider.flush();
    expect(readFileSync(ownedPath)).toEqual(before.file);
    expect(readFileSync(mapFile())).toEqual(before.map);
    expect(await sniProbe(port, 'z.example.com')).toMatchObject({ failed: expect.any(String) });
  });

  it('refuses a server address that could inject a master-CLI command, before sending it', async () => {
    await converge([claim('x', 'x.example.com', a.port)]);
    await provider.flush();
    const slot = (await read()).maps?.[0]?.entries.get('x.example.com') ?? '';
    const before = readFileSync(ownedPath);
    // Sent as is, the `;` would end `add server` and run the command after it: x would be moved to c.
    const injected = `127.0.0.1;@1 set server ${slot}/srv1 addr 127.0.0.1 port ${c.port};@1 show version`;
    const { current, plan: evil } = await handMade([claim('x', 'x.example.com', a.port, b.port)], (op) =>
      op.kind === 'create_server' ? { ...op, server: { ...op.server, address: injected } } : op,
    );
    expect(kinds(evil)).toEqual(['create_server']);
    await expect(owned.apply(evil, current, signal())).rejects.toThrow(TerminalError);
    for (let i = 0; i < 5; i++) expect(await sniProbe(port, 'x.example.com')).toEqual({ reached: 'a' });
    await provider.flush();
    expect(readFileSync(ownedPath)).toEqual(before);
  });

  it('surfaces a reload HAProxy fails (a port held by another process) and puts the previous file back', async () => {
    await converge([claim('x', 'x.example.com', a.port)]);
    await provider.flush();
    const before = readFileSync(ownedPath);
    const loads = await haproxy.loads();
    const held = await holdPort();
    try {
      const current = await owned.read(signal());
      const p = plan(
        renderDesired(resolveRoutes([claim('x', 'x.example.com', a.port)]).routes, {
          ...render,
          bind: { address: '127.0.0.1', port: held.port },
        }),
        current.state,
      );
      const error = await owned.apply(p, current, signal()).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(ReloadFailedError);
      // 3.0's and 3.2's master answers `reload` with the startup log; 2.6's answers nothing, so there is no
      // reason to give.
      if (version !== '2.6') expect(String(error)).toMatch(/cannot bind socket \(Address already in use\)/);
      else expect(String(error)).toMatch(/refused the new configuration/);
    } finally {
      await held.close();
    }
    expect(readFileSync(ownedPath)).toEqual(before);
    expect(await haproxy.loads()).toBe(loads);
    expect(await sniProbe(port, 'x.example.com')).toEqual({ reached: 'a' });
    // HAProxy takes the next good configuration as usual.
    await converge([claim('x', 'x.example.com', b.port), claim('y', 'y.example.com', c.port)]);
    expect(await sniProbe(port, 'y.example.com')).toEqual({ reached: 'c' });
  });

  it('reads back a server moved through the runtime API by someone else, and moves it back', async () => {
    await converge([claim('x', 'x.example.com', a.port)]);
    const name = (await read()).backends.find((x) => x.owned && x.servers.length > 0)?.name;
    expect(await haproxy.masterCli(`@1 set server ${name}/srv1 addr 127.0.0.1 port ${b.port}`)).toMatch(
      /changed/,
    );
    expect(await sniProbe(port, 'x.example.com')).toEqual({ reached: 'b' });
    // Drift made by hand at runtime is what a fresh read (the periodic resync's) is for.
    const drifted = (await read(true)).backends.find((x) => x.name === name);
    expect(drifted?.servers).toEqual([expect.objectContaining({ name: 'srv1', port: b.port, owned: true })]);
    const loads = await haproxy.loads();
    const { plan: fix, report } = await converge([claim('x', 'x.example.com', a.port)]);
    expect(kinds(fix)).toEqual(['update_server']);
    expect(report.reload).toBe('none');
    expect(await haproxy.loads()).toBe(loads);
    expect(await sniProbe(port, 'x.example.com')).toEqual({ reached: 'a' });
  });

  it('says so when HAProxy does not load the owned file at all, and puts the previous file back', async () => {
    const misplaced = join(haproxy.dir, 'not-loaded.cfg');
    writeFileSync(misplaced, '');
    const wrong = new StockHaproxyProvider(
      { ...stockConfigFor(haproxy), ownedFile: misplaced },
      { logger: pino({ level: 'silent' }), owner: registry },
    );
    try {
      const wrongOwned = ownedBy(wrong);
      const current = await wrongOwned.read(signal());
      const p = plan(
        renderDesired(resolveRoutes([claim('x', 'x.example.com', a.port)]).routes, render),
        current.state,
      );
      await expect(wrongOwned.apply(p, current, signal())).rejects.toThrow(
        /does not run the owned file: is it started with -f/,
      );
      expect(readFileSync(misplaced, 'utf8')).toBe('');
    } finally {
      await wrong.close();
    }
  }, 30_000);

  it('notices an owned file that HAProxy does not run, and reloads it into agreement', async () => {
    await converge([claim('x', 'x.example.com', a.port)]);
    await provider.flush();
    // As if the service had died between writing the files and reloading: the owned file has another
    // structure (a new inspect delay) and the map file names a route HAProxy lacks.
    const wanted = [claim('x', 'x.example.com', a.port), claim('y', 'y.example.com', b.port)];
    const changed = { ...render, inspectDelayMs: render.inspectDelayMs + 1000 };
    const current = await owned.read(signal());
    const next = current.derive(
      plan(renderDesired(resolveRoutes(wanted).routes, changed), current.state).operations,
      registry,
    ).state;
    writeFileSync(mapFile(), renderMapFile(next.maps?.[0]?.entries ?? new Map()));
    writeFileSync(
      ownedPath,
      renderOwnedFile(
        { frontends: next.frontends.filter((f) => f.owned), backends: next.backends.filter((x) => x.owned) },
        undefined,
        haproxy.dir,
      ),
    );
    const state = await read();
    expect(state.frontends.find((f) => f.name === render.frontendName)).toBeUndefined();
    expect(await sniProbe(port, 'y.example.com')).not.toHaveProperty('reached');
    const loads = await haproxy.loads();
    await converge(wanted, changed);
    expect(await haproxy.loads()).toBe(loads + 1);
    expect(await sniProbe(port, 'y.example.com')).toEqual({ reached: 'b' });
    expect(await sniProbe(port, 'x.example.com')).toEqual({ reached: 'a' });
    expect((await read(true)).frontends.find((f) => f.name === render.frontendName)?.owned).toBe(true);
    expect([...parseMapFile(readFileSync(mapFile(), 'utf8')).keys()]).toEqual([
      'x.example.com',
      'y.example.com',
    ]);
  });
});

async function holdPort(): Promise<{ port: number; close(): Promise<void> }> {
  const server: Server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  const address = server.address();
  if (!address || typeof address === 'string') throw new Error('no port');
  return { port: address.port, close: () => new Promise((r) => server.close(() => r())) };
}
