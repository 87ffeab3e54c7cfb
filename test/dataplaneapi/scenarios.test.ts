import { createServer, type Server } from 'node:net';
import { Writable } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import pino from 'pino';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { renderDesired } from '../../src/haproxy/render.js';
import { plan } from '../../src/plan/plan.js';
import { createDataplaneProvider } from '../../src/providers/dataplaneapi/index.js';
import { storageName } from '../../src/providers/dataplaneapi/map-names.js';
import type { DataplaneProvider } from '../../src/providers/dataplaneapi/provider.js';
import { OwnedProvider } from '../../src/registry/owned-provider.js';
import { resolveRoutes } from '../../src/routes/route.js';
import { DPAPI_USER } from '../support/dataplaneapi-testbed.js';
import { startProxy } from '../support/http-proxy.js';
import { registry } from '../support/owner.js';
import { freeLoopbackPort } from '../support/ports.js';
import { sniProbe } from '../support/tls.js';
import { waitFor } from '../support/wait.js';
import {
  type Harness,
  openTransactions,
  pass,
  rawConfig,
  record,
  resetToForeign,
  sections,
  source,
  startHarness,
  versionUnderTest,
} from './harness.js';

const FOREIGN = ['global', 'defaults base', 'frontend console', 'backend console_tls'];

async function holdPort(port: number): Promise<Server> {
  const server = createServer((s) => s.destroy());
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => resolve());
  });
  return server;
}

/** HAProxy 2.6 behind the API: runtime servers cannot be driven through it, so every change reloads. */
const runtime = it.skipIf(versionUnderTest() === '2.6');

describe.skipIf(!source)(`Data Plane API provider on HAProxy ${versionUnderTest()}`, () => {
  let h: Harness;
  let provider: DataplaneProvider;
  let foreignBefore: Map<string, string>;

  beforeAll(async () => {
    h = await startHarness();
    // The file as the operator wrote it, before the service's first change.
    foreignBefore = sections(await rawConfig(h.tb));
    for (const s of FOREIGN) expect(foreignBefore.has(s), s).toBe(true);
  });
  afterAll(async () => {
    // Every change above left the operator's sections exactly as they were written.
    if (h) {
      const after = sections(await rawConfig(h.tb));
      for (const s of FOREIGN) expect(after.get(s), s).toBe(foreignBefore.get(s));
      await h.close();
    }
  });
  beforeEach(async () => {
    // A write of runtime changes still due from the last test would race the reset.
    await h.quiet();
    await resetToForeign(h.tb);
    provider = h.provider();
  });

  it('converges from empty: each host reaches its own TLS backend, unknown SNI the foreign default', async () => {
    const report = await pass(h, provider, [
      record('alpha', 'alpha.example.com', h.alpha.port),
      record('beta', 'beta.example.com', h.beta.port),
    ]);
    expect(report.result.ok, report.result.error).toBe(true);
    expect(await sniProbe(h.sniPort, 'alpha.example.com')).toEqual({ reached: 'alpha' });
    expect(await sniProbe(h.sniPort, 'beta.example.com')).toEqual({ reached: 'beta' });
    expect(await sniProbe(h.sniPort, 'nobody.example.com')).toEqual({ reached: 'console' });
    expect(h.alpha.seenServernames).toContain('alpha.example.com');
    // Converged: the next pass changes nothing.
    expect(
      (
        await pass(h, provider, [
          record('alpha', 'alpha.example.com', h.alpha.port),
          record('beta', 'beta.example.com', h.beta.port),
        ])
      ).changed,
    ).toBe(false);
  });

  it('a new cluster is routable after a number of requests that does not grow with N', async () => {
    const base = [record('alpha', 'alpha.example.com', h.alpha.port)];
    expect((await pass(h, provider, base)).result.ok).toBe(true);
    const requestsFor = async (existing: ReturnType<typeof record>[], name: string) => {
      const counted = new OwnedProvider(h.provider(), registry);
      const claims = [...existing, record(name, `${name}.example.com`, h.gamma.port)].map((r) => ({
        cluster: r.name,
        host: r.host,
        endpoints: [{ address: '127.0.0.1', port: 'nodePort' in r.target ? r.target.nodePort : 0 }],
        claimedAt: 1,
      }));
      const current = await counted.read(AbortSignal.timeout(30_000));
      const p = plan(renderDesired(resolveRoutes(claims).routes, roomy), current.state);
      const report = await counted.apply(p, current, AbortSignal.timeout(60_000));
      return report.requests;
    };
    // Room for every route from the start: no pass below grows the slot pool.
    const roomy = { ...h.render, minSlots: 32 };
    expect((await pass(h, provider, base, roomy)).result.ok).toBe(true);
    const small = await requestsFor(base, 'gamma1');
    const many = Array.from({ length: 20 }, (_, i) => record(`n${i}`, `n${i}.example.com`, h.beta.port));
    const grown = [...base, record('gamma1', 'gamma1.example.com', h.gamma.port), ...many];
    expect((await pass(h, provider, grown, roomy)).result.ok).toBe(true);
    const large = await requestsFor(grown, 'gamma2');
    await waitFor(
      async () => JSON.stringify(await sniProbe(h.sniPort, 'gamma2.example.com')) === '{"reached":"gamma"}',
      10_000,
      'gamma2 routable',
    );
    // At runtime: the version and the workers read, then server, ready, map entry; on 2.6 the files and a
    // reload (+ polls while it reloads).
    expect(small).toBeGreaterThanOrEqual(3);
    expect(small).toBeLessThanOrEqual(12);
    expect(large).toBeLessThanOrEqual(small + 2);
    console.log(
      `requests for one new cluster on HAProxy ${versionUnderTest()}: ${small} at N=1, ${large} at N=22`,
    );
  });

  runtime('moves an endpoint without a reload', async () => {
    expect((await pass(h, provider, [record('alpha', 'alpha.example.com', h.alpha.port)])).result.ok).toBe(
      true,
    );
    expect(await sniProbe(h.sniPort, 'alpha.example.com')).toEqual({ reached: 'alpha' });
    const loads = await h.tb.loads();
    const reloads = (await h.tb.api.get('/services/haproxy/reloads')).data as unknown[];
    const report = await pass(h, provider, [record('alpha', 'alpha.example.com', h.beta.port)]);
    expect(report.result.ok, report.result.error).toBe(true);
    expect(await sniProbe(h.sniPort, 'alpha.example.com')).toEqual({ reached: 'beta' });
    // No "Loading success" in HAProxy's log, nothing new in the API's reload list.
    await sleep(1500);
    expect(await h.tb.loads()).toBe(loads);
    expect(((await h.tb.api.get('/services/haproxy/reloads')).data as unknown[]).length).toBe(reloads.length);
  });

  runtime('moves many endpoints at once at runtime, no reload; the files follow without one', async () => {
    const names = ['m1', 'm2', 'm3', 'm4', 'm5'];
    const at = (port: number) => names.map((n) => record(n, `${n}.example.com`, port));
    expect((await pass(h, provider, at(h.alpha.port))).result.ok).toBe(true);
    await provider.persisted();
    for (const n of names)
      expect(await sniProbe(h.sniPort, `${n}.example.com`)).toEqual({ reached: 'alpha' });
    const loads = await h.tb.loads();
    const proxy = await startProxy(h.tb.url, () => 'forward');
    const writes = () =>
      proxy.seen.filter((r) => r.method !== 'GET').map((r) => `${r.method} ${r.path.split('?')[0]}`);
    try {
      const counted = h.provider({ url: proxy.url, persistDelayMs: 20 });
      const report = await pass(h, counted, at(h.beta.port));
      expect(report.result.ok, report.result.error).toBe(true);
      // The pass itself: runtime requests only (a request per server), the configuration not written.
      const during = writes();
      expect(during.length).toBeGreaterThanOrEqual(names.length);
      for (const w of during) expect(w).toMatch(/^\S+ \/v3\/services\/haproxy\/runtime\//);
      await counted.persisted();
      // Then the files, once, without a reload.
      const raw = proxy.seen.filter((r) => r.path.startsWith('/v3/services/haproxy/configuration/raw?'));
      expect(raw.map((r) => `${r.method} ${r.path}`)).toEqual([
        expect.stringMatching(
          /^POST \/v3\/services\/haproxy\/configuration\/raw\?version=\d+&skip_reload=true$/,
        ),
      ]);
    } finally {
      await proxy.close();
    }
    for (const n of names) expect(await sniProbe(h.sniPort, `${n}.example.com`)).toEqual({ reached: 'beta' });
    await sleep(1500);
    expect(await h.tb.loads()).toBe(loads);
    // The files say so too: a provider that never wrote anything finds nothing to change, and HAProxy keeps
    // the moves when it next loads them.
    expect((await pass(h, h.provider(), at(h.beta.port))).changed).toBe(false);
    await h.tb.masterCli('reload');
    await waitFor(() => h.tb.loadCount() > loads, 10_000, 'the reload', { everyMs: 25 });
    for (const n of names)
      await waitFor(
        async () => JSON.stringify(await sniProbe(h.sniPort, `${n}.example.com`)) === '{"reached":"beta"}',
        5_000,
        `${n} at beta after the reload`,
      );
  });

  it('applies a first plan as one write of the configuration with one reload, maps beside it', async () => {
    const many = Array.from({ length: 12 }, (_, i) => record(`f${i}`, `f${i}.example.com`, h.gamma.port));
    const loads = await h.tb.loads();
    const proxy = await startProxy(h.tb.url, () => 'forward');
    try {
      const counted = h.provider({ url: proxy.url });
      const report = await pass(h, counted, many);
      expect(report.result.ok, report.result.error).toBe(true);
      const writes = proxy.seen.filter((r) => r.method !== 'GET').map((r) => `${r.method} ${r.path}`);
      // The map files (SNI, allow) in the storage, then the configuration with a reload: no transaction.
      const raw = writes.filter((w) => w.includes('/configuration/'));
      expect(raw).toEqual([
        expect.stringMatching(
          /^POST \/v3\/services\/haproxy\/configuration\/raw\?version=\d+&force_reload=true$/,
        ),
      ]);
      for (const w of writes.filter((x) => !x.includes('/configuration/')))
        expect(w).toMatch(/^(POST|PUT) \/v3\/services\/haproxy\/storage\/maps/);
    } finally {
      await proxy.close();
    }
    expect(await h.tb.loads()).toBe(loads + 1);
    for (const c of many) expect(await sniProbe(h.sniPort, c.host)).toEqual({ reached: 'gamma' });
    expect((await pass(h, h.provider(), many)).changed).toBe(false);
  });

  it('a deletion closes that host: its handshakes no longer reach its backend', async () => {
    const both = [
      record('alpha', 'alpha.example.com', h.alpha.port),
      record('beta', 'beta.example.com', h.beta.port),
    ];
    expect((await pass(h, provider, both)).result.ok).toBe(true);
    expect(await sniProbe(h.sniPort, 'beta.example.com')).toEqual({ reached: 'beta' });
    expect((await pass(h, provider, [both[0] as (typeof both)[0]])).result.ok).toBe(true);
    expect(await sniProbe(h.sniPort, 'beta.example.com')).toEqual({ reached: 'console' });
    expect(await sniProbe(h.sniPort, 'alpha.example.com')).toEqual({ reached: 'alpha' });
    // Its entry is gone from the SNI map HAProxy runs (2.6's runtime map reads are unusable through the API).
    if (versionUnderTest() === '2.6') return;
    const entries = await h.tb.api.get(
      `/services/haproxy/runtime/maps/${storageName(h.render.sniMap)}/entries`,
    );
    expect((entries.data as Array<{ key: string }>).map((e) => e.key)).toEqual(['alpha.example.com']);
  });

  it('a foreign write racing ours (409 on the version) still converges, the foreign write kept', async () => {
    let raced = false;
    const proxy = await startProxy(h.tb.url, async (req): Promise<'forward' | 'drop'> => {
      // Just before our first write of the configuration, another tool writes a change of its own.
      if (req.method === 'POST' && req.path.includes('/configuration/raw') && !raced) {
        raced = true;
        const v = (await h.tb.api.get('/services/haproxy/configuration/version')).data as number;
        const res = await h.tb.api.post(`/services/haproxy/configuration/backends?version=${v}`, {
          name: 'foreign_race',
          mode: 'tcp',
        });
        expect(res.status).toBeLessThan(300);
      }
      return 'forward';
    });
    try {
      const racing = h.provider({ url: proxy.url });
      const report = await pass(h, racing, [record('alpha', 'alpha.example.com', h.alpha.port)]);
      expect(raced).toBe(true);
      expect(report.result.ok, report.result.error).toBe(true);
      // 2.6 reloads by signal: the foreign write's reload may be the new worker the pass waited for, and ours
      // lands just after it.
      if (versionUnderTest() === '2.6')
        await waitFor(
          async () =>
            JSON.stringify(await sniProbe(h.sniPort, 'alpha.example.com')) === '{"reached":"alpha"}',
          10_000,
          'alpha routable',
        );
      expect(await sniProbe(h.sniPort, 'alpha.example.com')).toEqual({ reached: 'alpha' });
      const pushes = proxy.seen.filter((r) => r.method === 'POST' && r.path.includes('/configuration/raw'));
      expect(pushes.length).toBe(2);
      const foreign = await h.tb.api.get('/services/haproxy/configuration/backends/foreign_race');
      expect(foreign.status).toBe(200);
      expect(await openTransactions(h.tb)).toEqual([]);
    } finally {
      await proxy.close();
      const v = (await h.tb.api.get('/services/haproxy/configuration/version')).data as number;
      await h.tb.api.delete(`/services/haproxy/configuration/backends/foreign_race?version=${v}`);
    }
  });

  it('20 foreign open transactions do not hold it back, and it leaves them alone', async () => {
    const v = (await h.tb.api.get('/services/haproxy/configuration/version')).data as number;
    const foreign: string[] = [];
    for (let i = 0; i < 20; i++) {
      const res = await h.tb.api.post(`/services/haproxy/transactions?version=${v}`);
      expect(res.status).toBe(201);
      foreign.push((res.data as { id: string }).id);
    }
    try {
      // It opens no transaction of its own (the 21st would be refused with 429).
      const report = await pass(h, provider, [record('alpha', 'alpha.example.com', h.alpha.port)]);
      expect(report.result.ok, report.result.error).toBe(true);
      expect(await sniProbe(h.sniPort, 'alpha.example.com')).toEqual({ reached: 'alpha' });
      expect((await openTransactions(h.tb)).sort()).toEqual([...foreign].sort());
    } finally {
      for (const id of foreign) await h.tb.api.delete(`/services/haproxy/transactions/${id}`);
    }
  });

  it("a port held by another process fails the reload with HAProxy's words, then recovers", async () => {
    const clusters = [record('alpha', 'alpha.example.com', h.alpha.port)];
    const p = h.provider();
    expect((await pass(h, p, clusters)).result.ok).toBe(true);
    const heldPort = await freeLoopbackPort();
    const holder = await holdPort(heldPort);
    const moved = { ...h.render, bind: { address: '127.0.0.1', port: heldPort } };
    try {
      const failed = await pass(h, p, clusters, moved);
      expect(failed.result.ok).toBe(false);
      if (versionUnderTest() === '2.6') {
        // 2.6 reloads by signal: the API cannot see the failure, the provider sees no new worker.
        expect(failed.result.error).toMatch(/did not load the change|cannot bind socket/);
        await waitFor(() => h.tb.haproxyLog().includes('cannot bind socket'), 10_000, "HAProxy's bind alert");
      } else {
        expect(failed.result.error).toContain('cannot bind socket (Address already in use)');
      }
      // HAProxy still serves the previous configuration, and the state read does not pretend otherwise.
      expect(await sniProbe(h.sniPort, 'alpha.example.com')).toEqual({ reached: 'alpha' });
      // Whatever the API's view says, the state read never shows the failed bind as current.
      const read = await p.read(AbortSignal.timeout(30_000)).catch((err: unknown) => err);
      if (!(read instanceof Error)) {
        const ours = (read as Awaited<ReturnType<typeof p.read>>).raw.frontends.find(
          (f) => f.name === h.render.frontendName,
        );
        expect(ours?.bind?.port).toBe(h.sniPort);
      }
      const again = await pass(h, p, clusters, moved, 0);
      expect(again.result.ok).toBe(false);
    } finally {
      await new Promise<void>((r) => holder.close(() => r()));
    }
    // The port is free: the next pass converges by itself, proven by traffic on the new port.
    const recovered = await pass(h, p, clusters, moved);
    expect(recovered.result.ok, recovered.result.error).toBe(true);
    expect(await sniProbe(heldPort, 'alpha.example.com')).toEqual({ reached: 'alpha' });
    expect((await pass(h, p, clusters, moved)).changed).toBe(false);
    // Put the frontend back where the other tests expect it.
    expect((await pass(h, p, clusters)).result.ok).toBe(true);
  });

  it('names the credentials on 401, and the version on a ping', async () => {
    const wrong = h.provider({ password: 'wrong' });
    await expect(wrong.ping(AbortSignal.timeout(10_000))).rejects.toThrow(
      /KUBEBYON_DATAPLANE_USERNAME and KUBEBYON_DATAPLANE_PASSWORD/,
    );
    const info = await provider.ping(AbortSignal.timeout(10_000));
    expect(info.version).toMatch(/^Data Plane API v?3\./);
  });

  it('keeps its tags where this version can, says which at start, and never tags the inspect delay', async () => {
    const logged: string[] = [];
    const logger = pino(
      { level: 'info' },
      new Writable({
        write(chunk, _enc, done) {
          logged.push(JSON.parse(String(chunk)).msg);
          done();
        },
      }),
    );
    const started = await createDataplaneProvider(
      {
        url: h.tb.url,
        username: DPAPI_USER,
        password: h.tb.password,
        timeoutMs: 30_000,
        reloadTimeoutMs: 8_000,
        slots: 'config',
      },
      { logger, owner: registry },
    );
    await started.close?.();
    const line = logged.find((l) => l.startsWith('Data Plane API ')) ?? '';
    // v3.0 and v3.1 have no metadata on frontends, backends, binds or rules.
    const [, major, minor] = /^Data Plane API v(\d+)\.(\d+)\./.exec(line) ?? [];
    expect(major, line).toBe('3');
    const described = Number(minor) < 2;
    expect(line).toMatch(
      described ? /`description` of frontends and backends/ : /`metadata` on every object/,
    );
    console.log(`start log against the API under test: ${line}`);

    for (const port of [h.alpha.port, h.beta.port, h.alpha.port])
      expect((await pass(h, provider, [record('alpha', 'alpha.example.com', port)])).result.ok).toBe(true);
    await provider.persisted();
    const text = sections(await rawConfig(h.tb));
    const frontend = text.get(`frontend ${h.render.frontendName}`) ?? '';
    // The slot backend alpha's route is in (the one with a server).
    const [backend = ''] = [...text]
      .filter(([k, v]) => k.startsWith('backend kubebyon_slot_') && /^ {2}server /m.test(v))
      .map(([, v]) => v);
    const tag = '# {"owner":{"value":"kubebyon-haproxy-adapter"}}';
    if (described) {
      expect(frontend).toMatch(/^ {2}description kubebyon owner=kubebyon-haproxy-adapter$/m);
      expect(frontend).not.toContain('# {');
      expect(backend).toMatch(/^ {2}description kubebyon owner=kubebyon-haproxy-adapter( cluster=alpha)?$/m);
    } else {
      expect(frontend.split('\n')[0]).toContain(tag);
      expect(backend.split('\n')[0]).toContain(tag);
      expect(frontend).toMatch(/^ {2}bind .* # \{"owner"/m);
    }
    expect(backend).toMatch(new RegExp(`server \\S+ 127\\.0\\.0\\.1:${h.alpha.port}.* # \\{"owner"`));
    // v3.2.15 doubles a comment on this line at every write of the file: it carries none.
    expect(frontend).toMatch(/^ {2}tcp-request inspect-delay \S+$/m);
  });

  it('refuses a plan that deletes a foreign backend, writing nothing and leaving no transaction open', async () => {
    const owned = new OwnedProvider(provider, registry);
    const current = await owned.read(AbortSignal.timeout(10_000));
    const version = (await h.tb.api.get('/services/haproxy/configuration/version')).data as number;
    await expect(
      owned.apply(
        { operations: [{ kind: 'delete_backend', name: 'console_tls' }], conflicts: [] },
        current,
        AbortSignal.timeout(10_000),
      ),
    ).rejects.toThrow(/not owned/);
    expect((await h.tb.api.get('/services/haproxy/configuration/version')).data).toBe(version);
    expect(await openTransactions(h.tb)).toEqual([]);
  });
});
