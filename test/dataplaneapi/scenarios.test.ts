import { createServer, type Server } from 'node:net';
import { Writable } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import pino from 'pino';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createDataplaneProvider } from '../../src/providers/dataplaneapi/index.js';
import type { DataplaneProvider } from '../../src/providers/dataplaneapi/provider.js';
import { OwnedProvider } from '../../src/registry/owned-provider.js';
import { Backoff } from '../../src/timing/backoff.js';
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

  it('a new cluster is routable after one transaction whose request count does not grow with N', async () => {
    const base = [record('alpha', 'alpha.example.com', h.alpha.port)];
    expect((await pass(h, provider, base)).result.ok).toBe(true);
    const requestsFor = async (existing: ReturnType<typeof record>[], name: string) => {
      const counted = h.provider();
      const { interpret } = await import('../support/owner.js');
      const { plan } = await import('../../src/plan/plan.js');
      const { renderDesired } = await import('../../src/haproxy/render.js');
      const { resolveRoutes } = await import('../../src/routes/route.js');
      const claims = [...existing, record(name, `${name}.example.com`, h.gamma.port)].map((r) => ({
        cluster: r.name,
        host: r.host,
        endpoints: [{ address: '127.0.0.1', port: 'nodePort' in r.target ? r.target.nodePort : 0 }],
        claimedAt: 1,
      }));
      const current = await counted.readState(AbortSignal.timeout(30_000));
      const p = plan(renderDesired(resolveRoutes(claims).routes, h.render), interpret(current));
      const report = await counted.apply(p, current, AbortSignal.timeout(60_000));
      return report.requests;
    };
    const small = await requestsFor(base, 'gamma1');
    const many = Array.from({ length: 20 }, (_, i) => record(`n${i}`, `n${i}.example.com`, h.beta.port));
    expect(
      (await pass(h, provider, [...base, record('gamma1', 'gamma1.example.com', h.gamma.port), ...many]))
        .result.ok,
    ).toBe(true);
    const large = await requestsFor(
      [...base, record('gamma1', 'gamma1.example.com', h.gamma.port), ...many],
      'gamma2',
    );
    expect(await sniProbe(h.sniPort, 'gamma2.example.com')).toEqual({ reached: 'gamma' });
    // open, runtime info, backend with its server, rules, commit, runtime info (+ polls while 2.6 reloads)
    expect(small).toBeGreaterThanOrEqual(6);
    expect(small).toBeLessThanOrEqual(9);
    expect(large).toBeLessThanOrEqual(9);
    console.log(
      `requests for one new cluster on HAProxy ${versionUnderTest()}: ${small} at N=1, ${large} at N=22`,
    );
  });

  it('moves an endpoint without a reload', async () => {
    expect((await pass(h, provider, [record('alpha', 'alpha.example.com', h.alpha.port)])).result.ok).toBe(
      true,
    );
    expect(await sniProbe(h.sniPort, 'alpha.example.com')).toEqual({ reached: 'alpha' });
    const loads = h.tb.loadCount();
    const reloads = (await h.tb.api.get('/services/haproxy/reloads')).data as unknown[];
    const report = await pass(h, provider, [record('alpha', 'alpha.example.com', h.beta.port)]);
    expect(report.result.ok, report.result.error).toBe(true);
    expect(await sniProbe(h.sniPort, 'alpha.example.com')).toEqual({ reached: 'beta' });
    // No "Loading success" in HAProxy's log, nothing new in the API's reload list.
    await sleep(1500);
    expect(h.tb.loadCount()).toBe(loads);
    expect(((await h.tb.api.get('/services/haproxy/reloads')).data as unknown[]).length).toBe(reloads.length);
  });

  it('opens the next transaction ahead: a new cluster then needs no open; closing leaves none open', async () => {
    const proxy = await startProxy(h.tb.url, () => 'forward');
    const ahead = h.provider({ url: proxy.url, prepareTransactions: true });
    const oneOpen = () =>
      waitFor(() => openTransactions(h.tb), 10_000, 'a transaction opened ahead', {
        ok: (open) => open.length === 1,
        everyMs: 50,
      });
    try {
      expect((await pass(h, ahead, [record('alpha', 'alpha.example.com', h.alpha.port)])).result.ok).toBe(
        true,
      );
      await oneOpen();
      proxy.seen.length = 0;
      const report = await pass(h, ahead, [
        record('alpha', 'alpha.example.com', h.alpha.port),
        record('beta', 'beta.example.com', h.beta.port),
      ]);
      expect(report.result.ok, report.result.error).toBe(true);
      const writes = proxy.seen
        .filter((r) => r.method !== 'GET')
        .map((r) => `${r.method} ${r.path.split('?')[0]}`);
      expect(writes.slice(0, 3)).toEqual([
        'POST /v3/services/haproxy/configuration/backends',
        'PUT /v3/services/haproxy/configuration/frontends/kubebyon_sni/backend_switching_rules',
        expect.stringMatching(/^PUT \/v3\/services\/haproxy\/transactions\/[^/]+$/),
      ]);
      expect(await sniProbe(h.sniPort, 'beta.example.com')).toEqual({ reached: 'beta' });
      await oneOpen();
    } finally {
      await ahead.close();
      await proxy.close();
    }
    expect(await openTransactions(h.tb)).toEqual([]);
  });

  it('moves many endpoints at once without a reload: one edited file, the moves as runtime actions', async () => {
    const names = ['m1', 'm2', 'm3', 'm4', 'm5'];
    const at = (port: number) => names.map((n) => record(n, `${n}.example.com`, port));
    expect((await pass(h, provider, at(h.alpha.port))).result.ok).toBe(true);
    for (const n of names)
      expect(await sniProbe(h.sniPort, `${n}.example.com`)).toEqual({ reached: 'alpha' });
    const fanOut = h.provider({ runtimeMaxServers: 1, rawMinWrites: 2 });
    const loads = h.tb.loadCount();
    const proxy = await startProxy(h.tb.url, () => 'forward');
    try {
      const counted = h.provider({ url: proxy.url, runtimeMaxServers: 1, rawMinWrites: 2 });
      const report = await pass(h, counted, at(h.beta.port));
      expect(report.result.ok, report.result.error).toBe(true);
      // The file once, then one push of it with the five moves: no transaction, no request per server.
      const writes = proxy.seen.filter((r) => r.method !== 'GET');
      expect(writes).toEqual([
        {
          method: 'POST',
          path: expect.stringMatching(
            /^\/v3\/services\/haproxy\/configuration\/raw\?version=\d+&skip_reload=true$/,
          ),
        },
      ]);
    } finally {
      await proxy.close();
    }
    for (const n of names) expect(await sniProbe(h.sniPort, `${n}.example.com`)).toEqual({ reached: 'beta' });
    await sleep(1500);
    expect(h.tb.loadCount()).toBe(loads);
    // The file says so too: a provider that never wrote anything finds nothing to change, and HAProxy keeps
    // the moves when it next loads the file.
    expect((await pass(h, fanOut, at(h.beta.port))).changed).toBe(false);
    expect(
      (await pass(h, fanOut, [...at(h.beta.port), record('m6', 'm6.example.com', h.gamma.port)])).result.ok,
    ).toBe(true);
    for (const n of names) expect(await sniProbe(h.sniPort, `${n}.example.com`)).toEqual({ reached: 'beta' });
  });

  it('applies a large plan as one edited file with one reload, foreign sections untouched', async () => {
    const many = Array.from({ length: 12 }, (_, i) => record(`f${i}`, `f${i}.example.com`, h.gamma.port));
    const proxy = await startProxy(h.tb.url, () => 'forward');
    try {
      const counted = h.provider({ url: proxy.url });
      const report = await pass(h, counted, many);
      expect(report.result.ok, report.result.error).toBe(true);
      expect(proxy.seen.filter((r) => r.method !== 'GET')).toEqual([
        {
          method: 'POST',
          path: expect.stringMatching(
            /^\/v3\/services\/haproxy\/configuration\/raw\?version=\d+&force_reload=true$/,
          ),
        },
      ]);
    } finally {
      await proxy.close();
    }
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
    const backends = (await h.tb.api.get('/services/haproxy/configuration/backends')).data as Array<{
      name: string;
    }>;
    expect(backends.map((b) => b.name).filter((n) => n.includes('beta'))).toEqual([]);
  });

  it('a foreign commit racing ours (409 on open, 406 on commit) still converges', async () => {
    const proxy = await startProxy(h.tb.url, async (req): Promise<'forward' | 'drop'> => {
      // Just before our first commit, another tool commits a change of its own.
      if (req.method === 'PUT' && /\/v3\/services\/haproxy\/transactions\/[^/?]+/.test(req.path) && !raced) {
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
    let raced = false;
    try {
      const racing = h.provider({ url: proxy.url });
      const report = await pass(h, racing, [record('alpha', 'alpha.example.com', h.alpha.port)]);
      expect(raced).toBe(true);
      expect(report.result.ok, report.result.error).toBe(true);
      expect(await sniProbe(h.sniPort, 'alpha.example.com')).toEqual({ reached: 'alpha' });
      const commits = proxy.seen.filter((r) => r.method === 'PUT' && r.path.includes('/transactions/'));
      expect(commits.length).toBe(2);
      expect(await openTransactions(h.tb)).toEqual([]);
    } finally {
      await proxy.close();
      const v = (await h.tb.api.get('/services/haproxy/configuration/version')).data as number;
      await h.tb.api.delete(`/services/haproxy/configuration/backends/foreign_race?version=${v}`);
    }
  });

  it('20 foreign open transactions (429) hold it back; it converges once they are dropped', async () => {
    const v = (await h.tb.api.get('/services/haproxy/configuration/version')).data as number;
    const foreign: string[] = [];
    for (let i = 0; i < 20; i++) {
      const res = await h.tb.api.post(`/services/haproxy/transactions?version=${v}`);
      expect(res.status).toBe(201);
      foreign.push((res.data as { id: string }).id);
    }
    const refused = await h.tb.api.post(`/services/haproxy/transactions?version=${v}`);
    expect(refused.status).toBe(429);
    // A pass makes one attempt; as the loop does, a transient failure (429) is tried again after a backoff.
    const running = (async () => {
      const backoff = new Backoff(100, 30_000);
      for (let failures = 0; ; failures++) {
        const report = await pass(h, provider, [record('alpha', 'alpha.example.com', h.alpha.port)]);
        if (report.result.ok || report.failure !== 'transient' || failures >= 8) return report;
        await sleep(backoff.next());
      }
    })();
    await sleep(1500);
    for (const id of foreign) await h.tb.api.delete(`/services/haproxy/transactions/${id}`);
    const report = await running;
    expect(report.result.ok, report.result.error).toBe(true);
    expect(await sniProbe(h.sniPort, 'alpha.example.com')).toEqual({ reached: 'alpha' });
    expect(await openTransactions(h.tb)).toEqual([]);
  });

  for (const commit of ['force_reload', 'follow'] as const) {
    it(`a port held by another process fails the reload with HAProxy's words, then recovers (${commit})`, async () => {
      const clusters = [record('alpha', 'alpha.example.com', h.alpha.port)];
      const p = h.provider({ commit });
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
          await waitFor(
            () => h.tb.haproxyLog().includes('cannot bind socket'),
            10_000,
            "HAProxy's bind alert",
          );
        } else {
          expect(failed.result.error).toContain('cannot bind socket (Address already in use)');
        }
        // HAProxy still serves the previous configuration, and the state read does not pretend otherwise.
        expect(await sniProbe(h.sniPort, 'alpha.example.com')).toEqual({ reached: 'alpha' });
        // Whatever the API's view says, the state read never shows the failed bind as current.
        const read = await p.readState(AbortSignal.timeout(30_000)).catch((err: unknown) => err);
        if (!(read instanceof Error)) {
          const ours = (read as Awaited<ReturnType<typeof p.readState>>).frontends.find(
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
  }

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
        runtimeMaxServers: 10,
        runtimeMaxRequests: 600,
        slots: 'config',
        rawMinWrites: 0,
        commit: 'force_reload',
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
    const text = sections(await rawConfig(h.tb));
    const frontend = text.get(`frontend ${h.render.frontendName}`) ?? '';
    const [backend = ''] = [...text]
      .filter(([k]) => k.startsWith('backend kubebyon_alpha'))
      .map(([, v]) => v);
    const tag = '# {"owner":{"value":"kubebyon-haproxy-adapter"}}';
    if (described) {
      expect(frontend).toMatch(/^ {2}description kubebyon owner=kubebyon-haproxy-adapter$/m);
      expect(frontend).not.toContain('# {');
      expect(backend).toMatch(/^ {2}description kubebyon owner=kubebyon-haproxy-adapter cluster=alpha$/m);
    } else {
      expect(frontend.split('\n')[0]).toContain(tag);
      expect(frontend).toMatch(/use_backend .* # \{"owner"/);
    }
    expect(backend).toMatch(new RegExp(`server srv1 127\\.0\\.0\\.1:${h.alpha.port}.* # \\{"owner"`));
    // v3.2.15 doubles a comment on this line at every write of the file: it carries none.
    expect(frontend).toMatch(/^ {2}tcp-request inspect-delay \S+$/m);
  });

  it('leaves no transaction of its own open after a failed apply', async () => {
    const current = await provider.readState(AbortSignal.timeout(10_000));
    await expect(
      new OwnedProvider(provider, registry).apply(
        { operations: [{ kind: 'delete_backend', name: 'console_tls' }], conflicts: [] },
        current,
        AbortSignal.timeout(10_000),
      ),
    ).rejects.toThrow(/not owned/);
    expect(await openTransactions(h.tb)).toEqual([]);
  });
});
