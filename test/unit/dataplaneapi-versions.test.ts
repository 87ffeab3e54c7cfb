import { Writable } from 'node:stream';
import pino from 'pino';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { readSpec } from '../../scripts/generate-dataplaneapi.js';
import { DEFAULT_RENDER_OPTIONS, type RenderOptions, renderDesired } from '../../src/haproxy/render.js';
import { plan } from '../../src/plan/plan.js';
import { readCapabilities } from '../../src/providers/dataplaneapi/capability.js';
import { createDataplaneProvider } from '../../src/providers/dataplaneapi/index.js';
import type { DataplaneProvider } from '../../src/providers/dataplaneapi/provider.js';
import { OwnedProvider } from '../../src/registry/owned-provider.js';
import { Registry } from '../../src/registry/registry.js';
import { type RouteClaim, resolveRoutes } from '../../src/routes/route.js';
import {
  type FakeDataplaneApi,
  type FakeVersion,
  startFakeDataplaneApi,
} from '../support/fake-dataplaneapi.js';
import { claim, providerOn, startConfigFor } from '../support/fake-dataplaneapi-provider.js';
import { registry } from '../support/owner.js';

const signal = () => AbortSignal.timeout(10_000);
const render: RenderOptions = {
  ...{ ...DEFAULT_RENDER_OPTIONS, routing: 'rules' as const },
  bind: { address: '127.0.0.1', port: 18443 },
  defaultBackend: 'console_tls',
};
const foreign = {
  frontends: [],
  backends: [
    {
      name: 'console_tls',
      mode: 'tcp',
      description: 'the console # not ours',
      balance: { algorithm: 'roundrobin' },
      servers: { web1: { name: 'web1', address: '127.0.0.1', port: 9443 } },
    },
  ],
};
type Obj = Record<string, unknown> & { name: string };

/** One pass behind the registry, as the service runs it. */
async function converge(
  provider: DataplaneProvider,
  claims: RouteClaim[],
  owner: Registry = registry,
  options: RenderOptions = render,
) {
  const owned = new OwnedProvider(provider, owner);
  const current = await owned.readState(signal());
  const p = plan(renderDesired(resolveRoutes(claims).routes, options), owner.interpret(current));
  await owned.apply(p, current, signal());
  return p;
}

describe('capabilities, read off each supported version’s own document', () => {
  it.each([
    [
      '3.0.23',
      { document: '3.0', ownership: 'description', serverTags: true, rawFile: true, generalFiles: false },
    ],
    [
      '3.2.15',
      { document: '3.2', ownership: 'metadata', serverTags: true, rawFile: true, generalFiles: false },
    ],
    ['3.4', { document: '3.4', ownership: 'metadata', serverTags: true, rawFile: true, generalFiles: true }],
  ])('v%s', (version, expected) => {
    expect(readCapabilities(readSpec(version))).toEqual({ ok: true, capabilities: expected });
  });

  it('a document without metadata on servers reads them as their backend’s; without the raw actions, no file path', () => {
    const spec = readSpec('3.0.23') as {
      components: { schemas: Record<string, { allOf?: Array<{ properties?: Record<string, unknown> }> }> };
      paths: Record<string, { post?: { parameters?: Array<{ name?: string }> } }>;
    };
    for (const part of spec.components.schemas.server?.allOf ?? []) delete part.properties?.metadata;
    const raw = spec.paths['/services/haproxy/configuration/raw']?.post;
    if (raw) raw.parameters = (raw.parameters ?? []).filter((p) => p.name !== 'X-Runtime-Actions');
    expect(readCapabilities(spec)).toEqual({
      ok: true,
      capabilities: {
        document: '3.0',
        ownership: 'description',
        serverTags: false,
        rawFile: false,
        generalFiles: false,
      },
    });
  });
});

describe('the start log', () => {
  for (const [version, words] of [
    [
      '3.0.23',
      /^Data Plane API v3\.0\.23 fake: ownership tags in the `description` of frontends and backends, in `metadata` on servers, binds and rules known by shape/,
    ],
    ['3.4', /^Data Plane API v3\.4\.0 fake: ownership tags in `metadata` on every object/],
  ] as const) {
    it(`names the version and the ownership mechanism (v${version})`, async () => {
      const fake = await startFakeDataplaneApi({ version });
      const lines: string[] = [];
      const logger = pino(
        { level: 'info' },
        new Writable({
          write(chunk, _enc, done) {
            lines.push(String(chunk));
            done();
          },
        }),
      );
      try {
        const provider = await createDataplaneProvider(startConfigFor(fake), { logger, owner: registry });
        await provider.close?.();
        const logged = lines.map((l) => JSON.parse(l) as { msg: string; ownership?: string });
        expect(logged.map((l) => l.msg)).toEqual([expect.stringMatching(words)]);
      } finally {
        await fake.close();
      }
    });
  }
});

describe('on Data Plane API v3.0.23 (no metadata on frontends, backends, binds or rules)', () => {
  let fake: FakeDataplaneApi;
  beforeAll(async () => {
    fake = await startFakeDataplaneApi({ version: '3.0.23' });
  });
  afterAll(async () => {
    await fake?.close();
  });
  beforeEach(() => {
    fake.reset(foreign);
  });

  it('drops metadata where its document has none, as the real one does (so tags there would be lost)', async () => {
    const auth = `Basic ${Buffer.from(`${fake.username}:${fake.password}`).toString('base64')}`;
    const res = await fetch(
      `${fake.url}/v3/services/haproxy/configuration/frontends?version=${fake.version()}`,
      {
        method: 'POST',
        headers: { authorization: auth, 'content-type': 'application/json' },
        body: JSON.stringify({ name: 'tagged', mode: 'tcp', metadata: { owner: { value: 'x' } } }),
      },
    );
    expect(res.status).toBe(201);
    expect(fake.config.frontends.get('tagged')).toEqual({ name: 'tagged', mode: 'tcp' });
    expect(fake.violations.splice(0)).toEqual([expect.stringMatching(/unevaluatedProperty.*metadata/)]);
  });

  it('a wrong password: terminal, naming the variables, never repeating the password v3.0.23 echoes', async () => {
    const secret = 'not-the-password-4711';
    const provider = providerOn(fake, { password: secret });
    const err = await provider.ping(signal()).catch((e: unknown) => e);
    expect(String(err)).toMatch(/refused the credentials \(401\).*KUBEBYON_DATAPLANE_PASSWORD/);
    // Nothing the provider keeps or logs carries it: the error, its cause, the open-ahead path.
    expect(JSON.stringify({ err, message: String(err) })).not.toContain(secret);
    const ahead = providerOn(fake, { password: secret, prepareTransactions: true });
    await expect(ahead.readState(signal())).rejects.not.toThrow(secret);
    await ahead.close();
  });

  it('keeps the tags of frontends and backends in their description, of servers in their metadata', async () => {
    await converge(providerOn(fake), [claim('one')]);
    const frontend = fake.config.frontends.get('kubebyon_sni') as Obj;
    const backend = [...fake.config.backends.values()].find((b) => b.name.includes('one')) as Obj;
    expect(frontend.description).toBe('kubebyon owner=kubebyon-haproxy-adapter');
    expect(backend.description).toBe('kubebyon owner=kubebyon-haproxy-adapter cluster=one');
    expect(Object.values(backend.servers as Record<string, Obj>)[0]?.metadata).toEqual({
      owner: { value: 'kubebyon-haproxy-adapter' },
    });
    // Nothing was sent where the version has no place for it.
    expect(JSON.stringify([frontend.binds, frontend.tcp_request_rule_list])).not.toContain('metadata');
    expect(fake.violations).toEqual([]);
    // Converged: a provider that shares nothing with the first reads the same and plans nothing.
    expect((await converge(providerOn(fake), [claim('one')])).operations).toEqual([]);
  });

  it('honours the owner id: two owners with their own frontends never change each other’s objects', async () => {
    const other = new Registry('other-adapter');
    const otherRender = {
      ...render,
      frontendName: 'other_sni',
      namePrefix: 'other',
      bind: { address: '127.0.0.1', port: 18444 },
    };
    const objects = (whose: (description: string) => boolean) =>
      JSON.stringify(
        [...fake.config.frontends.values(), ...fake.config.backends.values()].filter((o) =>
          whose(String(o.description)),
        ),
      );
    const theirs = (d: string) => d.startsWith('kubebyon owner=other-adapter');
    const notTheirs = (d: string) => !theirs(d);
    await converge(providerOn(fake), [claim('one')]);
    const ours = objects(notTheirs);
    await converge(providerOn(fake, { owner: other }), [claim('two')], other, otherRender);
    await converge(providerOn(fake, { owner: other }), [claim('three')], other, otherRender);
    expect(fake.config.frontends.get('other_sni')?.description).toBe('kubebyon owner=other-adapter');
    expect(objects(notTheirs)).toBe(ours);
    const before = objects(theirs);
    expect(before).toContain('cluster=three');
    await converge(providerOn(fake), [claim('four')]);
    expect(objects(theirs)).toBe(before);
    expect(fake.violations).toEqual([]);
  });

  it('a foreign object holding a desired name is a conflict, and is never written', async () => {
    const name = renderDesired(resolveRoutes([claim('one')]).routes, render).backends[0]?.name as string;
    for (const description of [
      undefined,
      'kubebyon owner=someone-else cluster=one',
      'kubebyon  owner=kubebyon-haproxy-adapter',
    ]) {
      const squatter = { name, mode: 'tcp', ...(description ? { description } : {}) };
      fake.reset({ ...foreign, backends: [...foreign.backends, squatter] });
      fake.requests.length = 0;
      const p = await converge(providerOn(fake), [claim('one')]);
      expect(p.conflicts.map((c) => c.kind)).toContain('backend_not_owned');
      expect(fake.config.backends.get(name)).toEqual(squatter);
      expect(fake.requests.filter((r) => !r.startsWith('GET ') && r.includes(name))).toEqual([]);
    }
  });

  it('takes a rule in its frontend as its own when it points at one of its backends (the documented degradation); keeps others', async () => {
    await converge(providerOn(fake), [claim('one'), claim('two')]);
    const f = fake.config.frontends.get('kubebyon_sni') as Obj;
    const one = [...fake.config.backends.keys()].find((n) => n.includes('one')) as string;
    const byOther = [
      { name: one, cond: 'if', cond_test: '{ req.ssl_sni -i extra.example.com }' },
      { name: 'console_tls', cond: 'if', cond_test: '{ req.ssl_sni -i legacy.example.com }' },
    ];
    (f.backend_switching_rule_list as unknown[]).push(...byOther);
    fake.reset({ frontends: [f], backends: [...fake.config.backends.values()] });
    await converge(providerOn(fake), [claim('one')]);
    const rules = fake.config.frontends.get('kubebyon_sni')?.backend_switching_rule_list as Obj[];
    // The rule to our backend read as ours, and went with the change; the one to a foreign backend stayed.
    expect(rules.map((r) => r.cond_test)).toEqual([
      '{ req.ssl_sni -i one.example.com }',
      '{ req.ssl_sni -i legacy.example.com }',
    ]);
    expect(rules[1]).toEqual(byOther[1]);
  });
});

describe.each(['3.0.23', '3.4'] as FakeVersion[])('servers on v%s', (version) => {
  it('a moved endpoint keeps the server’s tags', async () => {
    const fake = await startFakeDataplaneApi({ version });
    try {
      fake.reset(foreign);
      await converge(providerOn(fake), [claim('one', 30001)]);
      await converge(providerOn(fake), [claim('one', 30002)]);
      expect(fake.runtimeChanges).toBe(1);
      const b = [...fake.config.backends.values()].find((x) => x.name.includes('one')) as Obj;
      expect(Object.values(b.servers as Record<string, Obj>)[0]).toMatchObject({
        port: 30002,
        metadata: { owner: { value: 'kubebyon-haproxy-adapter' } },
      });
      expect((await converge(providerOn(fake), [claim('one', 30002)])).operations).toEqual([]);
    } finally {
      await fake.close();
    }
  });
});

describe('on Data Plane API v3.2.15 (doubles a comment on `tcp-request inspect-delay` at every write)', () => {
  let fake: FakeDataplaneApi;
  beforeAll(async () => {
    fake = await startFakeDataplaneApi({ version: '3.2.15' });
  });
  afterAll(async () => {
    await fake?.close();
  });

  const delay = () =>
    ((fake.config.frontends.get('kubebyon_sni')?.tcp_request_rule_list ?? []) as Obj[]).find(
      (r) => r.type === 'inspect-delay',
    );

  it('never tags the inspect delay, so nothing grows however often the file is written', async () => {
    fake.reset(foreign);
    const provider = providerOn(fake);
    for (const n of ['a', 'b', 'c', 'd']) await converge(provider, [claim('one'), claim(n)]);
    expect(delay()).toEqual({ type: 'inspect-delay', timeout: 5000 });
  });

  it('drops a tag an earlier build put on it with the next change of the rules', async () => {
    fake.reset(foreign);
    await converge(providerOn(fake), [claim('one')]);
    const f = fake.config.frontends.get('kubebyon_sni') as Obj;
    const tagged = {
      type: 'inspect-delay',
      timeout: 5000,
      metadata: { owner: { value: 'kubebyon-haproxy-adapter' } },
    };
    f.tcp_request_rule_list = (f.tcp_request_rule_list as Obj[]).map((r) =>
      r.type === 'inspect-delay' ? tagged : r,
    );
    fake.reset({ frontends: [f], backends: [...fake.config.backends.values()] });
    fake.requests.length = 0;
    await converge(providerOn(fake), [claim('one'), claim('two')]);
    expect(
      fake.requests.filter((r) =>
        r.startsWith('PUT /services/haproxy/configuration/frontends/kubebyon_sni?'),
      ),
    ).toHaveLength(1);
    expect(delay()).toEqual({ type: 'inspect-delay', timeout: 5000 });
    expect(fake.violations).toEqual([]);
  });
});

describe('an API upgraded from v3.0 to a version with metadata', () => {
  it('keeps owning what was written into descriptions, and tags what it writes next with metadata', async () => {
    const old = await startFakeDataplaneApi({ version: '3.0.23' });
    const upgraded = await startFakeDataplaneApi({ version: '3.4' });
    try {
      old.reset(foreign);
      await converge(providerOn(old), [claim('one'), claim('two')]);
      // The same configuration file, now read by the newer API.
      upgraded.reset({
        frontends: [...old.config.frontends.values()],
        backends: [...old.config.backends.values()],
      });
      expect((await converge(providerOn(upgraded), [claim('one'), claim('two')])).operations).toEqual([]);
      const p = await converge(providerOn(upgraded), [claim('one'), claim('three')]);
      expect(p.conflicts).toEqual([]);
      const three = [...upgraded.config.backends.values()].find((b) => b.name.includes('three')) as Obj;
      expect(three.metadata).toEqual({
        owner: { value: 'kubebyon-haproxy-adapter' },
        cluster: { value: 'three' },
      });
      expect([...upgraded.config.backends.keys()].some((n) => n.includes('two'))).toBe(false);
      expect((await converge(providerOn(upgraded), [claim('one'), claim('three')])).operations).toEqual([]);
      expect(upgraded.violations).toEqual([]);
    } finally {
      await old.close();
      await upgraded.close();
    }
  });
});
