import { readFileSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import pino from 'pino';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { DEFAULT_RENDER_OPTIONS, type RenderOptions, renderDesired } from '../../src/haproxy/render.js';
import { applyOperations } from '../../src/plan/apply.js';
import { type Plan, plan } from '../../src/plan/plan.js';
import { renderOwnedFile } from '../../src/providers/haproxy/owned-file.js';
import { parseOwnedFile } from '../../src/providers/haproxy/owned-file-parse.js';
import { StockHaproxyProvider } from '../../src/providers/haproxy/provider.js';
import { ReloadFailedError, TerminalError } from '../../src/providers/provider.js';
import { type RouteClaim as Claim, resolveRoutes } from '../../src/routes/route.js';
import {
  type HaproxyTestbed,
  haproxyVersionUnderTest,
  startHaproxyTestbed,
} from '../support/haproxy-testbed.js';
import { interpret, isOwned, registry } from '../support/owner.js';
import { freeLoopbackPort } from '../support/ports.js';
import { operatorConfig, stockConfigFor, stockProviderFor } from '../support/stock-haproxy.js';
import { type NamedTlsServer, sniProbe, startNamedTlsServer } from '../support/tls.js';
import { waitFor } from '../support/wait.js';

const version = haproxyVersionUnderTest();
const signal = () => AbortSignal.timeout(60_000);

// The stock-HAProxy provider's own promises, on a real HAProxy: endpoint moves without reloads, refused
// configurations that change nothing, reload failures with HAProxy's words, and drift read back.
describe(`haproxy provider on HAProxy ${version}`, () => {
  let haproxy: HaproxyTestbed;
  let provider: StockHaproxyProvider;
  let render: RenderOptions;
  let a: NamedTlsServer;
  let b: NamedTlsServer;
  let c: NamedTlsServer;
  let port: number;
  let ownedPath: string;

  const read = async () => interpret(await provider.readState(signal()));
  const planFor = async (claims: Claim[], options = render): Promise<Plan> =>
    plan(renderDesired(resolveRoutes(claims).routes, options), await read());
  const claim = (cluster: string, host: string, ...ports: number[]): Claim => ({
    cluster,
    host,
    endpoints: ports.map((p) => ({ address: '127.0.0.1', port: p })),
    claimedAt: 0,
  });
  const converge = async (claims: Claim[], options = render) => {
    const p = await planFor(claims, options);
    const report = await provider.apply(p, await provider.readState(signal()), signal());
    expect((await planFor(claims, options)).operations).toEqual([]);
    return { plan: p, report };
  };

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
    // Rules routing (a reload per structure change); map routing has its own suite (stock-map-routing).
    render = {
      ...DEFAULT_RENDER_OPTIONS,
      routing: 'rules',
      bind: { address: '127.0.0.1', port },
      healthChecks: false,
    };
  });
  afterAll(async () => {
    await haproxy?.stop();
    await Promise.all([a?.close(), b?.close(), c?.close()]);
  });
  beforeEach(async () => {
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
      await provider.readState(signal());
      await provider.ping(signal());
    }
  });

  it('creates routes with one reload, then moves, adds and removes endpoints with none', async () => {
    const loads = haproxy.loadCount();
    const first = await converge([claim('x', 'x.example.com', a.port)]);
    expect(first.report.reload).toBe('succeeded');
    expect(haproxy.loadCount()).toBe(loads + 1);
    expect(await sniProbe(port, 'x.example.com')).toEqual({ reached: 'a' });

    const moved = await converge([claim('x', 'x.example.com', b.port)]);
    expect(moved.plan.operations.map((o) => o.kind)).toEqual(['update_server']);
    expect(moved.report).toEqual({ reload: 'none', requests: expect.any(Number) });
    expect(await sniProbe(port, 'x.example.com')).toEqual({ reached: 'b' });

    // Two endpoints, then back to one: a runtime add and a runtime delete.
    const added = await converge([claim('x', 'x.example.com', b.port, c.port)]);
    expect(added.plan.operations.map((o) => o.kind)).toEqual(['create_server']);
    expect(added.report.reload).toBe('none');
    const seen = new Set<string>();
    for (let i = 0; i < 20 && seen.size < 2; i++) {
      const r = await sniProbe(port, 'x.example.com');
      if ('reached' in r) seen.add(r.reached);
    }
    expect([...seen].sort()).toEqual(['b', 'c']);
    const removed = await converge([claim('x', 'x.example.com', c.port)]);
    expect(removed.plan.operations.map((o) => o.kind)).toEqual(['delete_server']);
    expect(removed.report.reload).toBe('none');
    for (let i = 0; i < 5; i++) expect(await sniProbe(port, 'x.example.com')).toEqual({ reached: 'c' });

    expect(haproxy.loadCount()).toBe(loads + 1);
    // The owned file follows shortly (batched, off the apply's path), so that the next reload or restart
    // agrees with the runtime.
    const ports = () =>
      parseOwnedFile(readFileSync(ownedPath, 'utf8')).state.backends[0]?.servers.map((s) => s.port);
    await waitFor(
      () => JSON.stringify(ports()) === JSON.stringify([c.port]),
      3_000,
      'the owned file to follow',
    );
  });

  it('moves 250 endpoints with no reload, many address changes to a master-CLI line', async () => {
    const names = Array.from({ length: 250 }, (_, i) => `m${i}`);
    await converge(names.map((n) => claim(n, `${n}.example.com`, a.port)));
    const loads = haproxy.loadCount();
    const { plan: p, report } = await converge(names.map((n) => claim(n, `${n}.example.com`, b.port)));
    expect(p.operations.filter((o) => o.kind === 'update_server')).toHaveLength(250);
    expect(report.reload).toBe('none');
    // Every command counts, though they went three lines to the master.
    expect(report.requests).toBeGreaterThanOrEqual(250);
    for (const n of ['m0', 'm99', 'm100', 'm249'])
      expect(await sniProbe(port, `${n}.example.com`)).toEqual({ reached: 'b' });
    await sleep(500);
    expect(haproxy.loadCount()).toBe(loads);
    // The owned file says the same: a fresh provider finds nothing to do.
    expect(
      plan(
        renderDesired(resolveRoutes(names.map((n) => claim(n, `${n}.example.com`, b.port))).routes, render),
        interpret(await stockProviderFor(haproxy).readState(signal())),
      ).operations,
    ).toEqual([]);
  });

  it('falls back to a reload to add a server under an algorithm the runtime cannot extend (source)', async () => {
    const source = { ...render, balance: 'source' as const };
    await converge([claim('x', 'x.example.com', a.port)], source);
    const loads = haproxy.loadCount();
    const { report } = await converge([claim('x', 'x.example.com', a.port, b.port)], source);
    expect(report.reload).toBe('succeeded');
    expect(haproxy.loadCount()).toBe(loads + 1);
  });

  it('leaves the running configuration and the owned file as they were when HAProxy refuses the new one', async () => {
    await converge([claim('x', 'x.example.com', a.port)]);
    const before = readFileSync(ownedPath);
    const loads = haproxy.loadCount();
    const p = await planFor([claim('x', 'x.example.com', a.port)], { ...render, defaultBackend: 'console' });
    // The planner never points at a missing backend; a hand-made operation does, and `haproxy -c` refuses it.
    const bad: Plan = {
      operations: p.operations.map((op) =>
        op.kind === 'update_frontend'
          ? { ...op, frontend: { ...op.frontend, defaultBackend: 'no_such_backend' } }
          : op,
      ),
      conflicts: [],
    };
    expect(bad.operations.map((o) => o.kind)).toEqual(['update_frontend']);
    const error = await provider
      .apply(bad, await provider.readState(signal()), signal())
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(TerminalError);
    expect(String(error)).toMatch(/no_such_backend/);
    expect(readFileSync(ownedPath)).toEqual(before);
    expect(haproxy.loadCount()).toBe(loads);
    expect(await sniProbe(port, 'x.example.com')).toEqual({ reached: 'a' });
  });

  it('refuses a value that could inject configuration before writing anything', async () => {
    await converge([claim('x', 'x.example.com', a.port)]);
    const before = readFileSync(ownedPath);
    const p = await planFor([claim('y', 'y.example.com', b.port)]);
    const evil: Plan = {
      operations: p.operations.map((op) =>
        op.kind === 'set_switching_rules'
          ? {
              ...op,
              rules: op.rules.map((r) => ({
                ...r,
                host: 'y.example.com }\n  use_backend console if TRUE #',
              })),
            }
          : op,
      ),
      conflicts: [],
    };
    await expect(provider.apply(evil, await provider.readState(signal()), signal())).rejects.toThrow(
      TerminalError,
    );
    expect(readFileSync(ownedPath)).toEqual(before);
  });

  it('surfaces a reload HAProxy fails (a port held by another process) and puts the previous file back', async () => {
    await converge([claim('x', 'x.example.com', a.port)]);
    const before = readFileSync(ownedPath);
    const loads = haproxy.loadCount();
    const held = await holdPort();
    try {
      const p = await planFor([claim('x', 'x.example.com', a.port)], {
        ...render,
        bind: { address: '127.0.0.1', port: held.port },
      });
      const error = await provider
        .apply(p, await provider.readState(signal()), signal())
        .catch((e: unknown) => e);
      expect(error).toBeInstanceOf(ReloadFailedError);
      // 3.0's and 3.2's master answers `reload` with the startup log; 2.6's answers nothing, so there is no
      // reason to give.
      if (version !== '2.6') expect(String(error)).toMatch(/cannot bind socket \(Address already in use\)/);
      else expect(String(error)).toMatch(/refused the new configuration/);
    } finally {
      await held.close();
    }
    expect(readFileSync(ownedPath)).toEqual(before);
    expect(haproxy.loadCount()).toBe(loads);
    expect(await sniProbe(port, 'x.example.com')).toEqual({ reached: 'a' });
    // HAProxy takes the next good configuration as usual.
    await converge([claim('x', 'x.example.com', b.port), claim('y', 'y.example.com', c.port)]);
    expect(await sniProbe(port, 'y.example.com')).toEqual({ reached: 'c' });
  });

  it('reads back a server moved through the runtime API by someone else, and moves it back', async () => {
    await converge([claim('x', 'x.example.com', a.port)]);
    const name = (await read()).backends.find((x) => x.owned)?.name;
    expect(await haproxy.masterCli(`@1 set server ${name}/srv1 addr 127.0.0.1 port ${b.port}`)).toMatch(
      /changed/,
    );
    expect(await sniProbe(port, 'x.example.com')).toEqual({ reached: 'b' });
    // Drift made by hand at runtime is what a fresh read (the periodic resync's) is for.
    const drifted = interpret(await provider.readState(signal(), { fresh: true })).backends.find(
      (x) => x.name === name,
    );
    expect(drifted?.servers).toEqual([expect.objectContaining({ name: 'srv1', port: b.port, owned: true })]);
    const loads = haproxy.loadCount();
    const { plan: fix, report } = await converge([claim('x', 'x.example.com', a.port)]);
    expect(fix.operations.map((o) => o.kind)).toEqual(['update_server']);
    expect(report.reload).toBe('none');
    expect(haproxy.loadCount()).toBe(loads);
    expect(await sniProbe(port, 'x.example.com')).toEqual({ reached: 'a' });
  });

  it('says so when HAProxy does not load the owned file at all, and puts the previous file back', async () => {
    const misplaced = join(haproxy.dir, 'not-loaded.cfg');
    writeFileSync(misplaced, '');
    const wrong = new StockHaproxyProvider(
      { ...stockConfigFor(haproxy), ownedFile: misplaced },
      { logger: pino({ level: 'silent' }), owner: registry },
    );
    const p = plan(
      renderDesired(resolveRoutes([claim('x', 'x.example.com', a.port)]).routes, render),
      interpret(await wrong.readState(signal())),
    );
    await expect(wrong.apply(p, await wrong.readState(signal()), signal())).rejects.toThrow(
      /does not run the owned file: is it started with -f/,
    );
    expect(readFileSync(misplaced, 'utf8')).toBe('');
  }, 30_000);

  it('notices an owned file that HAProxy does not run, and reloads it into agreement', async () => {
    await converge([claim('x', 'x.example.com', a.port)]);
    // As if the service had died between writing the file and reloading: the file names a route HAProxy lacks.
    const wanted = [claim('x', 'x.example.com', a.port), claim('y', 'y.example.com', b.port)];
    const raw = await provider.readState(signal());
    const next = applyOperations(raw, (await planFor(wanted)).operations, registry);
    writeFileSync(
      ownedPath,
      renderOwnedFile({
        frontends: next.frontends.filter((f) => isOwned(f.tags)),
        backends: next.backends.filter((x) => isOwned(x.tags)),
      }),
    );
    const state = await read();
    expect(state.frontends.find((f) => f.name === render.frontendName)).toBeUndefined();
    expect(await sniProbe(port, 'y.example.com')).not.toHaveProperty('reached');
    const loads = haproxy.loadCount();
    await converge(wanted);
    expect(haproxy.loadCount()).toBe(loads + 1);
    expect(await sniProbe(port, 'y.example.com')).toEqual({ reached: 'b' });
    expect((await read()).frontends.find((f) => f.name === render.frontendName)?.owned).toBe(true);
  });
});

async function holdPort(): Promise<{ port: number; close(): Promise<void> }> {
  const server: Server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  const address = server.address();
  if (!address || typeof address === 'string') throw new Error('no port');
  return { port: address.port, close: () => new Promise((r) => server.close(() => r())) };
}
