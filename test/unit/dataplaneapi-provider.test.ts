import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { DEFAULT_RENDER_OPTIONS, renderDesired } from '../../src/haproxy/render.js';
import { ConcurrentChangeError, ReloadFailedError, TerminalError } from '../../src/model/errors.js';
import { plan } from '../../src/plan/plan.js';
import { createDataplaneProvider, LEDGER_FILE } from '../../src/providers/dataplaneapi/index.js';
import {
  type DataplaneProvider,
  TooManyTransactionsError,
} from '../../src/providers/dataplaneapi/provider.js';
import { OwnedProvider } from '../../src/registry/owned-provider.js';
import { type RouteClaim, resolveRoutes } from '../../src/routes/route.js';
import { describeProvider } from '../contract/provider-contract.js';
import {
  type Exchange,
  FAKE_VERSIONS,
  type FakeDataplaneApi,
  loadExchanges,
  startFakeDataplaneApi,
} from '../support/fake-dataplaneapi.js';
import { claim, providerOn, startConfigFor } from '../support/fake-dataplaneapi-provider.js';
import { interpret, ownerTags, registry } from '../support/owner.js';
import { waitFor } from '../support/wait.js';

const silent = pino({ level: 'silent' });

const owner = { owner: { value: ownerTags().owner as string } };
const foreign = {
  frontends: [
    {
      name: 'console',
      mode: 'http',
      binds: { '127.0.0.1:8443': { name: '127.0.0.1:8443', address: '127.0.0.1', port: 8443 } },
    },
  ],
  backends: [
    {
      name: 'console_tls',
      mode: 'tcp',
      balance: { algorithm: 'roundrobin' },
      servers: { web1: { name: 'web1', address: '127.0.0.1', port: 9443 } },
    },
  ],
};
const render = {
  ...{ ...DEFAULT_RENDER_OPTIONS, routing: 'rules' as const },
  bind: { address: '127.0.0.1', port: 18443 },
  defaultBackend: 'console_tls',
};
const signal = () => AbortSignal.timeout(10_000);

type Read = Awaited<ReturnType<DataplaneProvider['readState']>>;
/** The plan from what `current` holds to `claims`. */
const planTo = (claims: RouteClaim[], current: Read) =>
  plan(renderDesired(resolveRoutes(claims).routes, render), interpret(current));

async function converge(provider: DataplaneProvider, claims: RouteClaim[]) {
  const current = await provider.readState(signal());
  const p = planTo(claims, current);
  return { plan: p, report: await provider.apply(p, current, signal()) };
}

/** Applies `p` to what `provider` reads now; resolves with what the apply threw. */
async function applyFailure(provider: DataplaneProvider, p: ReturnType<typeof planTo>): Promise<unknown> {
  return provider.apply(p, await provider.readState(signal()), signal()).catch((e: unknown) => e);
}

function recorded(note: RegExp | number): Exchange['response'] {
  const all = loadExchanges();
  const e = typeof note === 'number' ? all[note] : all.find((x) => note.test(x.note));
  if (!e) throw new Error(`no recorded exchange ${note}`);
  return e.response;
}

describe('dataplaneapi provider against a fake API checked by the OpenAPI document', () => {
  let fake: FakeDataplaneApi;
  beforeAll(async () => {
    fake = await startFakeDataplaneApi();
  });
  afterAll(async () => {
    await fake?.close();
  });
  beforeEach(() => {
    fake.reset(foreign);
    fake.requests.length = 0;
  });
  afterEach(() => {
    // Every request any test made is one the API's own document allows.
    expect(fake.violations).toEqual([]);
  });

  it('a new cluster: one transaction of a full_section backend, the rules, and the commit', async () => {
    const provider = providerOn(fake);
    await converge(provider, [claim('one')]);
    fake.requests.length = 0;
    const { report } = await converge(provider, [claim('one'), claim('two')]);
    const writes = fake.requests.filter((r) => !r.startsWith('GET '));
    expect(writes).toEqual([
      expect.stringMatching(/^POST \/services\/haproxy\/transactions\?version=\d+$/),
      expect.stringMatching(
        /^POST \/services\/haproxy\/configuration\/backends\?transaction_id=.+&full_section=true$/,
      ),
      expect.stringMatching(
        /^PUT \/services\/haproxy\/configuration\/frontends\/kubebyon_sni\/backend_switching_rules\?transaction_id=/,
      ),
      expect.stringMatching(/^PUT \/services\/haproxy\/transactions\/[^?]+\?force_reload=true$/),
    ]);
    expect(report).toEqual({ reload: 'succeeded', requests: 6 });
    const created = fake.config.backends.get(
      [...fake.config.backends.keys()].find((k) => k.includes('two')) as string,
    );
    expect(created?.metadata).toEqual({ owner: owner.owner, cluster: { value: 'two' } });
    expect(Object.values(created?.servers as object)[0]).toMatchObject({
      metadata: owner,
      check: 'enabled',
    });
  });

  it('the request count of one new cluster does not grow with N; after its own commit a read is the version only', async () => {
    const provider = providerOn(fake);
    const count = async (n: number) => {
      fake.reset(foreign);
      const existing = Array.from({ length: n }, (_, i) => claim(`c${i}`));
      await converge(provider, existing);
      fake.requests.length = 0;
      const { report } = await converge(provider, [...existing, claim('new')]);
      return { report: report.requests, total: fake.requests.length };
    };
    const one = await count(1);
    const many = await count(300);
    expect(many).toEqual(one);
    // The version moved by our commit alone: the objects as written are what the API holds, nothing is
    // read again but the version.
    expect(fake.requests[0]).toBe('GET /services/haproxy/configuration/version');
    expect(fake.requests.filter((r) => r.includes('full_section=true') && r.startsWith('GET '))).toEqual([]);
    fake.requests.length = 0;
    await provider.readState(signal());
    expect(fake.requests).toEqual(['GET /services/haproxy/configuration/version']);
  });

  it('reads both lists again once someone else moved the version, and on a cold start', async () => {
    const provider = providerOn(fake);
    await converge(provider, [claim('one')]);
    // Another tool writes: the version moves past what our commit left.
    fake.reset({
      ...foreign,
      frontends: [...fake.config.frontends.values()],
      backends: [...fake.config.backends.values()],
    });
    fake.requests.length = 0;
    await provider.readState(signal());
    expect(fake.requests.sort()).toEqual([
      'GET /services/haproxy/configuration/backends?full_section=true',
      'GET /services/haproxy/configuration/frontends?full_section=true',
      'GET /services/haproxy/configuration/version',
    ]);
    fake.requests.length = 0;
    await providerOn(fake).readState(signal());
    expect(fake.requests.filter((r) => r.includes('full_section=true'))).toHaveLength(2);
  });

  it('opens the next transaction ahead: the next change writes into it, a moved version drops it, close too', async () => {
    const provider = providerOn(fake, { prepareTransactions: true });
    const openAhead = () =>
      waitFor(() => fake.openTransactions(), 5_000, 'one transaction opened ahead', {
        ok: (open) => open.length === 1,
        everyMs: 10,
      });
    await converge(provider, [claim('one')]);
    const [ahead] = await openAhead();
    fake.requests.length = 0;
    await converge(provider, [claim('one'), claim('two')]);
    const writes = fake.requests.filter((r) => !r.startsWith('GET '));
    // No open before the writes: they go into the transaction opened ahead; then the next one is opened.
    expect(writes[0]).toMatch(
      new RegExp(`^POST /services/haproxy/configuration/backends\\?transaction_id=${ahead}&`),
    );
    expect(writes.at(-1)).toMatch(/^PUT \/services\/haproxy\/transactions\//);
    const [second] = await openAhead();
    expect(second).not.toBe(ahead);
    expect(fake.requests.at(-1)).toMatch(/^POST \/services\/haproxy\/transactions\?version=\d+$/);
    // Someone else writes: the one opened ahead is stale, dropped, and the change opens its own.
    fake.reset({
      ...foreign,
      frontends: [...fake.config.frontends.values()],
      backends: [...fake.config.backends.values()],
    });
    fake.requests.length = 0;
    await converge(provider, [claim('one'), claim('two'), claim('three')]);
    expect(fake.requests).toContain(`DELETE /services/haproxy/transactions/${second}`);
    await openAhead();
    await provider.close();
    expect(fake.openTransactions()).toEqual([]);
  });

  it('counts every request it sends, reads included, and the bytes of bodies both ways', async () => {
    const counted = { requests: 0, sent: 0, received: 0 };
    const provider = providerOn(fake, {
      traffic: {
        request: () => counted.requests++,
        bytes: (direction, n) => {
          counted[direction] += n;
        },
      },
    });
    await converge(provider, [claim('one'), claim('two')]);
    expect(counted.requests).toBe(fake.requests.length);
    expect(counted.requests).toBeGreaterThan(5);
    // The backends and rules written, and the lists read back, are bodies of a few hundred bytes each.
    expect(counted.sent).toBeGreaterThan(500);
    expect(counted.received).toBeGreaterThan(500);
  });

  it('an endpoint move goes through the runtime path: one server replace with the version, no reload', async () => {
    const provider = providerOn(fake);
    await converge(provider, [claim('one', 30001), claim('two', 30001)]);
    const reloads = fake.reloads;
    fake.requests.length = 0;
    const { report, plan: p } = await converge(provider, [claim('one', 30002), claim('two', 30001)]);
    expect(p.operations.map((o) => o.kind)).toEqual(['update_server']);
    expect(fake.requests.filter((r) => !r.startsWith('GET '))).toEqual([
      expect.stringMatching(
        /^PUT \/services\/haproxy\/configuration\/backends\/kubebyon_one_[0-9a-f]+\/servers\/srv1\?version=\d+$/,
      ),
    ]);
    expect(report).toEqual({ reload: 'none', requests: 1 });
    expect(fake.reloads).toBe(reloads);
    expect(fake.runtimeChanges).toBe(1);
  });

  it('a runtime move failing halfway keeps the moves before it and sends none after; a fresh read and plan finish it', async () => {
    const provider = providerOn(fake);
    const names = ['a', 'b', 'c'];
    await converge(
      provider,
      names.map((n) => claim(n, 30001)),
    );
    const moved = names.map((n) => claim(n, 30002));
    const planFor = (state: Read) => planTo(moved, state);
    const current = await provider.readState(signal());
    const p = planFor(current);
    const backends = p.operations.map((o) => (o.kind === 'update_server' ? o.backend : o.kind));
    expect(p.operations.map((o) => o.kind)).toEqual(['update_server', 'update_server', 'update_server']);
    const port = (backend: string | undefined) =>
      Object.values(fake.config.backends.get(backend ?? '')?.servers as Record<string, { port: number }>)[0]
        ?.port;
    // The second server's PUT fails as an API whose runtime socket did not answer would.
    fake.inject({
      method: 'PUT',
      path: new RegExp(`^/services/haproxy/configuration/backends/${backends[1]}/servers/[^/]+$`),
      answer: { status: 500, headers: {}, body: { code: 500, message: 'runtime API did not answer' } },
    });
    fake.requests.length = 0;
    const err = await provider.apply(p, current, signal()).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Error);
    expect(err).not.toBeInstanceOf(TerminalError);
    expect(fake.requests.filter((r) => r.startsWith('PUT '))).toHaveLength(2);
    expect(backends.map(port)).toEqual([30002, 30001, 30001]);
    // What the provider hands back next is what the API holds: the first move, not the state before it.
    const owned = new OwnedProvider(provider, registry);
    const fresh = await owned.readState(signal());
    const rest = planFor(fresh);
    expect(rest.operations.map((o) => (o.kind === 'update_server' ? o.backend : o.kind))).toEqual(
      backends.slice(1),
    );
    expect(await owned.apply(rest, fresh, signal())).toEqual({ reload: 'none', requests: 2 });
    expect(backends.map(port)).toEqual([30002, 30002, 30002]);
    expect(planFor(await owned.readState(signal())).operations).toEqual([]);
  });

  it('a fan-out above the runtime threshold is one transaction, one request per backend', async () => {
    const provider = providerOn(fake, { runtimeMaxServers: 2 });
    const names = ['a', 'b', 'c', 'd'];
    await converge(
      provider,
      names.map((n) => claim(n, 30001)),
    );
    fake.requests.length = 0;
    const { report } = await converge(
      provider,
      names.map((n) => claim(n, 30002)),
    );
    const writes = fake.requests.filter((r) => !r.startsWith('GET '));
    expect(
      writes.filter((r) =>
        /^PUT .*\/configuration\/backends\/[^/]+\?transaction_id=.*full_section=true$/.test(r),
      ),
    ).toHaveLength(4);
    expect(writes).toHaveLength(6);
    expect(report.reload).toBe('succeeded');
  });

  it('a deletion is one request in the transaction, after the rules stop pointing at the backend', async () => {
    const provider = providerOn(fake);
    await converge(provider, [claim('one'), claim('two')]);
    fake.requests.length = 0;
    await converge(provider, [claim('one')]);
    const writes = fake.requests.filter((r) => !r.startsWith('GET '));
    expect(writes[1]).toMatch(/backend_switching_rules/);
    expect(writes[2]).toMatch(/^DELETE \/services\/haproxy\/configuration\/backends\/kubebyon_two_/);
    expect(writes).toHaveLength(4);
  });

  it('keeps foreign switching rules in its frontend exactly as read', async () => {
    const provider = providerOn(fake);
    await converge(provider, [claim('one')]);
    const f = fake.config.frontends.get('kubebyon_sni');
    const foreignRule = {
      name: 'console_tls',
      cond: 'if',
      cond_test: '{ req.ssl_sni -i legacy.example.com } || { src 127.0.0.9 }',
      metadata: { tool: { value: 'someone-else', extra: 1 } },
    };
    if (!f) throw new Error('the fake has no frontend');
    (f.backend_switching_rule_list as unknown[]).push(foreignRule);
    fake.reset({
      frontends: [...fake.config.frontends.values()],
      backends: [...fake.config.backends.values()],
    });
    await converge(provider, [claim('one'), claim('two')]);
    const rules = fake.config.frontends.get('kubebyon_sni')?.backend_switching_rule_list as unknown[];
    expect(rules).toHaveLength(3);
    expect(rules[2]).toEqual(foreignRule);
  });

  it('409 on open and 406 on commit are concurrent changes; the open transaction is dropped', async () => {
    const provider = providerOn(fake);
    const state = await provider.readState(signal());
    const p = planTo([claim('one')], state);
    fake.inject({
      method: 'PUT',
      path: /^\/services\/haproxy\/transactions\/[^/]+$/,
      answer: recorded(/outdated/),
    });
    await expect(provider.apply(p, state, signal())).rejects.toBeInstanceOf(ConcurrentChangeError);
    expect(fake.openTransactions()).toEqual([]);
    fake.inject({ method: 'POST', path: /^\/services\/haproxy\/transactions$/, answer: recorded(6) });
    await provider.readState(signal());
    await expect(provider.apply(p, await provider.readState(signal()), signal())).rejects.toBeInstanceOf(
      ConcurrentChangeError,
    );
  });

  it('429 is transient (retried with backoff), not terminal', async () => {
    const provider = providerOn(fake);
    const p = planTo([claim('one')], await provider.readState(signal()));
    fake.inject({
      method: 'POST',
      path: /^\/services\/haproxy\/transactions$/,
      answer: {
        status: 429,
        headers: {},
        body: {
          code: 429,
          message: 'cannot start a new transaction, reached the maximum amount of 20 active transactions',
        },
      },
    });
    const err = await applyFailure(provider, p);
    expect(err).toBeInstanceOf(TooManyTransactionsError);
    expect(err).not.toBeInstanceOf(TerminalError);
  });

  it('a configuration HAProxy refuses (400) is terminal and carries its message', async () => {
    const provider = providerOn(fake);
    const p = planTo([claim('one')], await provider.readState(signal()));
    fake.inject({
      method: 'PUT',
      path: /^\/services\/haproxy\/transactions\/[^/]+$/,
      answer: recorded(17),
    });
    const err = await applyFailure(provider, p);
    expect(err).toBeInstanceOf(TerminalError);
    expect(String(err)).toContain("no such ACL 'garbage('");
    expect(fake.openTransactions()).toEqual([]);
  });

  it('a failed followed reload is a ReloadFailedError with HAProxy words; the view is reloaded from disk first', async () => {
    const provider = providerOn(fake, { commit: 'follow' });
    const p = planTo([claim('one')], await provider.readState(signal()));
    fake.inject({
      method: 'GET',
      path: /^\/services\/haproxy\/reloads\//,
      answer: recorded(62),
      apply: true,
    });
    const err = await applyFailure(provider, p);
    expect(err).toBeInstanceOf(ReloadFailedError);
    expect(String(err)).toContain('cannot bind socket (Address already in use)');
    fake.requests.length = 0;
    await provider.readState(signal());
    expect(fake.requests.slice(0, 4)).toEqual([
      'GET /services/haproxy/configuration/raw',
      'GET /services/haproxy/configuration/version',
      'GET /services/haproxy/runtime/info',
      expect.stringMatching(/^POST \/services\/haproxy\/configuration\/raw\?version=\d+&force_reload=true$/),
    ]);
  });

  it('a failed force_reload commit (400 Reload failed) is a ReloadFailedError', async () => {
    const provider = providerOn(fake);
    const p = planTo([claim('one')], await provider.readState(signal()));
    const output = String((recorded(62).body as { response: string }).response);
    fake.inject({
      method: 'PUT',
      path: /^\/services\/haproxy\/transactions\/[^/]+$/,
      answer: {
        status: 400,
        headers: {},
        body: { code: 400, message: `Reload failed: failed to reload configuration, ${output}` },
      },
    });
    const err = await applyFailure(provider, p);
    expect(err).toBeInstanceOf(ReloadFailedError);
    expect(String(err)).toContain('cannot bind socket (Address already in use) for [127.0.0.1:19443]');
  });

  it('401 is terminal and names the credentials', async () => {
    const provider = providerOn(fake, { password: 'wrong' });
    const err = await provider.ping(signal()).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(TerminalError);
    expect(String(err)).toMatch(/KUBEBYON_DATAPLANE_USERNAME and KUBEBYON_DATAPLANE_PASSWORD/);
    expect(fake.requests.at(-1)).toBe('GET /specification_openapiv3');
  });

  it('behind the registry, a change to an object it does not own sends no write', async () => {
    const provider = providerOn(fake);
    const current = await provider.readState(signal());
    fake.requests.length = 0;
    await expect(
      new OwnedProvider(provider, registry).apply(
        { operations: [{ kind: 'delete_backend', name: 'console_tls' }], conflicts: [] },
        current,
        signal(),
      ),
    ).rejects.toThrow(/not owned/);
    expect(fake.requests.filter((r) => !r.startsWith('GET '))).toEqual([]);
  });

  it('drops the transactions a crashed run left open, from the ledger beside the state file', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'kubebyon-ledger-'));
    try {
      const v = fake.version();
      const leaked = await fetch(`${fake.url}/v3/services/haproxy/transactions?version=${v}`, {
        method: 'POST',
        headers: {
          authorization: `Basic ${Buffer.from(`${fake.username}:${fake.password}`).toString('base64')}`,
        },
      }).then((r) => r.json() as Promise<{ id: string }>);
      writeFileSync(join(dir, LEDGER_FILE), JSON.stringify({ api: 'elsewhere', open: [leaked.id] }));
      expect(fake.openTransactions()).toEqual([leaked.id]);
      const provider = await createDataplaneProvider(startConfigFor(fake), {
        logger: silent,
        owner: registry,
        stateDir: dir,
      });
      expect(fake.openTransactions()).toEqual([]);
      expect(JSON.parse(readFileSync(join(dir, LEDGER_FILE), 'utf8')).open).toEqual([]);
      await provider.close?.();
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('dataplaneapi provider start', () => {
  it('refuses an API whose document has neither metadata nor descriptions, naming what is missing', async () => {
    const spec = (await startFakeDataplaneApi().then(async (f) => {
      await f.close();
      return f.spec;
    })) as { components: { schemas: Record<string, { properties?: Record<string, unknown> }> } };
    const old = structuredClone(spec);
    for (const name of ['frontend_base', 'backend_base']) {
      delete old.components.schemas[name]?.properties?.metadata;
      delete old.components.schemas[name]?.properties?.description;
    }
    const fake = await startFakeDataplaneApi({ spec: old });
    try {
      await expect(
        createDataplaneProvider(startConfigFor(fake), { logger: silent, owner: registry }),
      ).rejects.toThrow(/`metadata` on frontends, backends .*v3\.2.*`description` on frontends and backends/);
    } finally {
      await fake.close();
    }
  });

  it('starts while the API is unreachable; ping then fails without being terminal', async () => {
    const provider = await createDataplaneProvider(
      {
        url: 'http://127.0.0.1:9',
        username: 'a',
        password: 'b',
        timeoutMs: 2000,
        reloadTimeoutMs: 2000,
        runtimeMaxServers: 10,
        runtimeMaxRequests: 600,
        slots: 'config',
        rawMinWrites: 0,
        commit: 'force_reload',
      },
      { logger: silent, owner: registry },
    );
    const err = await provider.ping(signal()).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Error);
    expect(err).not.toBeInstanceOf(TerminalError);
    await provider.close?.();
  });
});

// The contract against a fake of each supported version: each keeps only what its document declares, so a
// tag written where that version has no place for it would read back foreign and fail the contract.
for (const version of FAKE_VERSIONS) {
  let contractFake: FakeDataplaneApi | undefined;
  describeProvider(
    `dataplaneapi (fake API v${version}, every request checked against its OpenAPI document)`,
    async () => {
      const fake = await startFakeDataplaneApi({ version });
      contractFake = fake;
      return {
        provider: providerOn(fake),
        render,
        reset: async () => fake.reset(foreign),
        cleanup: async () => {
          expect(contractFake?.violations).toEqual([]);
          await fake.close();
        },
        fresh: () => providerOn(fake),
      };
    },
    { runs: 40 },
  );
}
