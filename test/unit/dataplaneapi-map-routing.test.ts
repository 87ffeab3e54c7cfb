import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { renderDesired } from '../../src/haproxy/render.js';
import { ConcurrentChangeError } from '../../src/model/errors.js';
import { plan } from '../../src/plan/plan.js';
import {
  MapNames,
  mapRuleFile,
  mapRuleName,
  storageName,
} from '../../src/providers/dataplaneapi/map-names.js';
import { readFrontend } from '../../src/providers/dataplaneapi/mapping.js';
import { withServers } from '../../src/providers/dataplaneapi/persist.js';
import type { DataplaneProvider } from '../../src/providers/dataplaneapi/provider.js';
import { lineTagsFor } from '../../src/providers/dataplaneapi/raw-lines.js';
import { editConfigText } from '../../src/providers/dataplaneapi/raw-text.js';
import { runtimeMapOps } from '../../src/providers/dataplaneapi/runtime-maps.js';
import { type RouteClaim, resolveRoutes } from '../../src/routes/route.js';
import { type FakeDataplaneApi, startFakeDataplaneApi } from '../support/fake-dataplaneapi.js';
import { claim, mapRender, providerOn, SNI_MAP } from '../support/fake-dataplaneapi-provider.js';
import { interpret, registry } from '../support/owner.js';
import { waitFor } from '../support/wait.js';

const signal = () => AbortSignal.timeout(10_000);
const render = mapRender(4);

describe('map names and the map rule, as the real API stores and reads them', () => {
  it('the storage renames dots before .map; the rule round-trips; the frontend reads it as sniMap', () => {
    expect(storageName(SNI_MAP)).toBe('kubebyon-haproxy-adapter_sni.map');
    const file = `/etc/haproxy/maps/${storageName(SNI_MAP)}`;
    const rule = { name: mapRuleName(file) };
    expect(mapRuleFile(rule)).toBe(file);
    expect(mapRuleFile({ ...rule, cond: 'if' })).toBeUndefined();
    expect(() => mapRuleName('/x/$(evil).map')).toThrow();
    const children = { bind: () => ({}), tcpRule: () => ({}), rule: () => ({}) };
    const f = readFrontend(
      {
        name: 'sni',
        backend_switching_rule_list: [
          { name: 'b1', cond: 'if', cond_test: '{ req.ssl_sni -i a.example.com }' },
          rule,
        ],
      },
      registry,
      children,
      new MapNames([SNI_MAP]),
    );
    expect(f.sniMap).toBe(SNI_MAP);
    expect(f.rules.map((r) => r.backend)).toEqual(['b1']);
  });

  it('the edited file ignores map entries (they are the map file’s) while it adds slots', () => {
    const text = 'backend s1\n  mode tcp\n  balance leastconn\n';
    const before = {
      frontends: [],
      backends: [{ name: 's1', balance: 'leastconn', servers: [], tags: registry.tags() }],
    };
    const out = editConfigText(
      text,
      before,
      [
        { kind: 'delete_map_entry', map: SNI_MAP, host: 'gone.example.com', backend: 's1' },
        { kind: 'create_backend', backend: { name: 's2', balance: 'leastconn' } },
      ],
      registry,
      { ownership: 'description', serverTags: false } as never,
    );
    expect(out).toContain('backend s2');
  });

  it('persistence rewrites only the named backends’ server lines', () => {
    const text =
      'backend s1\n  mode tcp\n  server old 10.0.0.1:1\n\nbackend other\n  server keep 10.0.0.2:2\n';
    const out = withServers(
      text,
      new Map([['s1', [{ name: 'srv1', address: '127.0.0.1', port: 30001, check: false, tags: {} }]]]),
      lineTagsFor({ ownership: 'description', serverTags: false } as never),
    );
    expect(out).toBe(
      'backend s1\n  mode tcp\n  server srv1 127.0.0.1:30001\n\nbackend other\n  server keep 10.0.0.2:2\n',
    );
  });
});

describe('dataplaneapi provider, map routing, against the fake API', () => {
  let fake: FakeDataplaneApi;
  let provider: DataplaneProvider;
  beforeAll(async () => {
    fake = await startFakeDataplaneApi();
  });
  afterAll(async () => {
    await fake?.close();
  });
  beforeEach(() => {
    fake.reset({});
    fake.requests.length = 0;
    // No sniMaps: the default map name is the owner's (`sniMapNameFor`), read back as such.
    provider = providerOn(fake, { persistDebounceMs: 20, persistMaxDelayMs: 200 });
  });
  afterEach(async () => {
    await provider.close();
    expect(fake.violations).toEqual([]);
  });

  async function converge(claims: RouteClaim[], options: { fresh?: boolean } = {}, r = render) {
    const current = await provider.readState(signal(), options);
    const p = plan(renderDesired(resolveRoutes(claims).routes, r), interpret(current));
    return { plan: p, report: await provider.apply(p, current, signal()) };
  }
  const writes = () => fake.requests.filter((r) => !r.startsWith('GET '));

  it('an install stores the map with its entries before the commit that loads it, and reads it back', async () => {
    await converge([claim('one')]);
    const upload = writes().findIndex((r) => r.startsWith('POST /services/haproxy/storage/maps'));
    const commit = writes().findIndex((r) => /^PUT \/services\/haproxy\/transactions\//.test(r));
    expect(upload).toBeGreaterThanOrEqual(0);
    expect(upload).toBeLessThan(commit);
    const stored = fake.runtime.storage.get(storageName(SNI_MAP)) ?? '';
    expect(stored).toMatch(/^one\.example\.com \S+slot_00001\n$/);
    const state = await provider.readState(signal(), { fresh: true });
    expect(state.frontends[0]?.sniMap).toBe(SNI_MAP);
    expect(state.maps?.[0]?.entries.get('one.example.com')).toMatch(/slot_00001$/);
    expect((await converge([claim('one')])).plan.operations).toEqual([]);
  });

  it('a new route is runtime only, servers before the entry; then persisted without a reload', async () => {
    await converge([claim('one')]);
    await provider.persisted();
    const reloads = fake.reloads;
    fake.requests.length = 0;
    const { report } = await converge([claim('one'), claim('two', 30002)]);
    expect(report.reload).toBe('none');
    expect(writes()).toEqual([
      expect.stringMatching(/^POST \/services\/haproxy\/runtime\/backends\/\S+slot_00002\/servers$/),
      expect.stringMatching(/^PUT \/services\/haproxy\/runtime\/backends\/\S+slot_00002\/servers\/srv1$/),
      `POST /services/haproxy/runtime/maps/${storageName(SNI_MAP)}/entries`,
    ]);
    await waitFor(() => fake.rawPushed?.includes('127.0.0.1:30002') === true, 2_000, 'the server persisted');
    // The map file follows in the same batch (no force_sync per entry), after the servers.
    await waitFor(
      () => /^two\.example\.com \S+slot_00002$/m.test(fake.runtime.storage.get(storageName(SNI_MAP)) ?? ''),
      2_000,
      'the map file persisted',
    );
    const pushes = writes().filter((r) => /configuration\/raw|storage\/maps\//.test(r));
    expect(pushes).toEqual([
      expect.stringMatching(/^POST \/services\/haproxy\/configuration\/raw\?.*skip_reload=true/),
      expect.stringMatching(/^PUT \/services\/haproxy\/storage\/maps\/\S+\?skip_reload=true$/),
    ]);
    expect(fake.requests.filter((r) => r.startsWith('POST /services/haproxy/configuration/raw'))).toEqual([
      expect.stringMatching(/skip_reload=true/),
    ]);
    expect(fake.reloads).toBe(reloads);
  });

  it('new routes in one pass: servers side by side, every server ready before the first entry; a failure stops it', async () => {
    const serverPost = /^POST \/services\/haproxy\/runtime\/backends\/(\S+)\/servers$/;
    const ready = /^PUT \/services\/haproxy\/runtime\/backends\/(\S+)\/servers\/srv1$/;
    const entries = /^POST \/services\/haproxy\/runtime\/maps\/\S+\/entries$/;
    const roomy = { ...render, minSlots: 32 };
    await converge([claim('one')], {}, roomy);
    await provider.persisted();
    fake.requests.length = 0;
    const three = [claim('one'), claim('two', 30002), claim('three', 30003), claim('four', 30004)];
    expect((await converge(three, {}, roomy)).report.reload).toBe('none');
    const w = writes().filter((r) => r.includes('/runtime/'));
    expect(w.filter((r) => serverPost.test(r))).toHaveLength(3);
    expect(w.filter((r) => entries.test(r))).toHaveLength(3);
    expect([...(fake.runtime.entries.get(storageName(SNI_MAP))?.keys() ?? [])].sort()).toEqual(
      ['four', 'one', 'three', 'two'].map((x) => `${x}.example.com`),
    );
    // Side by side: a second slot's server was asked for before the first one was enabled.
    let adding = 0;
    let most = 0;
    for (const r of w) {
      if (serverPost.test(r)) adding++;
      if (ready.test(r)) adding--;
      most = Math.max(most, adding);
    }
    expect(most).toBeGreaterThan(1);
    const lastReady = w.findLastIndex((r) => ready.test(r));
    expect(w.findIndex((r) => entries.test(r))).toBeGreaterThan(lastReady);
    // A server refused: nothing after it starts, and no entry names a slot whose servers may be missing.
    await provider.persisted();
    fake.inject({
      method: 'POST',
      path: /^\/services\/haproxy\/runtime\/backends\/[^/]+\/servers$/,
      answer: { status: 500, headers: {}, body: { code: 500, message: 'refused' } },
    });
    fake.requests.length = 0;
    await expect(
      converge([...three, claim('five', 30005), claim('six', 30006)], {}, roomy),
    ).rejects.toThrow();
    expect(writes().filter((r) => entries.test(r))).toEqual([]);
  });

  it('a deleted route loses its entry before its servers; a server with open streams drains without failing', async () => {
    await converge([claim('one'), claim('two', 30002)]);
    await converge([claim('one'), claim('two', 30002)]);
    const slot = [...(fake.runtime.entries.get(storageName(SNI_MAP)) ?? new Map())].find(
      ([k]) => k === 'two.example.com',
    )?.[1];
    fake.runtime.busy.add(`${slot}/srv1`);
    fake.requests.length = 0;
    const { report } = await converge([claim('one')]);
    expect(report.reload).toBe('none');
    expect(writes()).toEqual([
      `DELETE /services/haproxy/runtime/maps/${storageName(SNI_MAP)}/entries/two.example.com`,
      `PUT /services/haproxy/runtime/backends/${slot}/servers/srv1`,
      `DELETE /services/haproxy/runtime/backends/${slot}/servers/srv1`,
    ]);
    // Still draining: the next pass tries again; once the streams are gone the server goes.
    fake.runtime.busy.clear();
    expect((await converge([claim('one')])).plan.operations.map((o) => o.kind)).toEqual(['delete_server']);
    expect((await converge([claim('one')])).plan.operations).toEqual([]);
  });

  it('an endpoint move is a delete and an add at runtime; with a stream on the server, the configuration moves it', async () => {
    await converge([claim('one')]);
    await provider.persisted();
    const slot = fake.runtime.entries.get(storageName(SNI_MAP))?.get('one.example.com');
    const reloads = fake.reloads;
    fake.requests.length = 0;
    expect((await converge([claim('one', 30009)])).report.reload).toBe('none');
    expect(writes()).toEqual([
      `PUT /services/haproxy/runtime/backends/${slot}/servers/srv1`,
      `DELETE /services/haproxy/runtime/backends/${slot}/servers/srv1`,
      `POST /services/haproxy/runtime/backends/${slot}/servers`,
      `PUT /services/haproxy/runtime/backends/${slot}/servers/srv1`,
    ]);
    // A held stream: deleting would fail, so the configuration's path changes the address in place.
    await provider.persisted();
    fake.runtime.busy.add(`${slot}/srv1`);
    fake.requests.length = 0;
    // HAProxy refuses the delete: the server is put back in service, and the pass is to read again.
    await expect(converge([claim('one', 30010)])).rejects.toBeInstanceOf(ConcurrentChangeError);
    expect(writes()).toEqual([
      `PUT /services/haproxy/runtime/backends/${slot}/servers/srv1`,
      `DELETE /services/haproxy/runtime/backends/${slot}/servers/srv1`,
      `PUT /services/haproxy/runtime/backends/${slot}/servers/srv1`,
    ]);
    fake.requests.length = 0;
    await converge([claim('one', 30010)], { fresh: true });
    expect(writes().some((r) => r.includes('/runtime/backends/'))).toBe(false);
    expect(
      writes().some((r) => /^(PUT|POST) \/services\/haproxy\/(configuration|transactions)/.test(r)),
    ).toBe(true);
    expect(fake.reloads).toBe(reloads);
    // The configuration holds the new endpoint (the real API also sets it at runtime: the real suite).
    const servers = Object.values(
      (fake.config.backends.get(slot ?? '')?.servers ?? {}) as Record<string, { port?: number }>,
    );
    expect(servers.map((x) => x.port)).toEqual([30010]);
  });

  it('reads are kept while version and worker stay (our own persistence included); a reload changes the revision', async () => {
    await converge([claim('one')]);
    await converge([claim('one'), claim('two', 30002)]);
    await provider.persisted();
    // Our own write of the runtime server moved the version: what was read still holds, nothing is read again.
    fake.requests.length = 0;
    await provider.readState(signal());
    expect(fake.requests).toEqual([
      'GET /services/haproxy/configuration/version',
      'GET /services/haproxy/runtime/info',
    ]);
    const before = await provider.revision(signal());
    // Someone reloads HAProxy from a file without the runtime server (its line taken out).
    const res = await fetch(`${fake.url}/v3/services/haproxy/configuration/raw`, {
      method: 'POST',
      headers: {
        authorization: `Basic ${Buffer.from(`${fake.username}:${fake.password}`).toString('base64')}`,
        'content-type': 'text/plain',
      },
      body: (fake.rawPushed ?? '').replace(/^.*:30002\b.*\n/m, ''),
    });
    expect(res.status).toBe(201);
    expect(await provider.revision(signal())).not.toBe(before);
    const { plan: repair, report } = await converge([claim('one'), claim('two', 30002)]);
    expect(report.reload).toBe('none');
    expect(repair.operations.map((o) => o.kind)).toContain('create_server');
  });

  it('our own reloads keep the revision token; one by someone else moves it', async () => {
    await converge([claim('one')]);
    const before = await provider.revision(signal());
    const reloads = fake.reloads;
    // Pool growth: new slot backends, committed with a reload.
    const many = ['two', 'three', 'four', 'five'].map((n, i) => claim(n, 30002 + i));
    expect((await converge([claim('one'), ...many], {}, { ...render, minSlots: 8 })).report.reload).toBe(
      'succeeded',
    );
    expect(fake.reloads).toBeGreaterThan(reloads);
    expect(await provider.revision(signal())).toBe(before);
    fake.reload();
    expect(await provider.revision(signal())).not.toBe(before);
  });

  it('a read while our persistence is answered late waits for it instead of reading everything again', async () => {
    await converge([claim('one')]);
    await provider.persisted();
    // The API has applied the push (the version moved) but its answer is still on the way, as when it parses
    // thousands of slots.
    fake.slow = [{ method: 'POST', path: /^\/services\/haproxy\/configuration\/raw$/, ms: 300 }];
    await converge([claim('one'), claim('two', 30002)]);
    const before = fake.version();
    await waitFor(() => fake.version() > before, 2_000, 'the push applied');
    fake.requests.length = 0;
    const state = await provider.readState(signal());
    expect(state.backends.flatMap((b) => b.servers.map((s) => s.port))).toContain(30002);
    expect(fake.requests.filter((r) => /configuration\/backends|stats\/native/.test(r))).toEqual([]);
  });

  it('only server and map-entry plans on existing backends take the runtime path', () => {
    const current = {
      frontends: [
        {
          name: 'f',
          bind: null,
          inspectDelayMs: null,
          acceptsTlsHello: true,
          defaultBackend: null,
          rules: [],
          sniMap: SNI_MAP,
          tags: {},
        },
      ],
      backends: [
        { name: 's1', balance: 'leastconn', servers: [], tags: {} },
        { name: 'hashed', balance: 'source', servers: [], tags: {} },
      ],
    };
    const server = { name: 'srv1', address: '127.0.0.1', port: 1, check: false, owned: true };
    const entry = {
      kind: 'set_map_entry' as const,
      map: SNI_MAP,
      host: 'a.example.com',
      backend: 's1',
      previous: null,
      cluster: 'a',
    };
    const ops = (operations: unknown[]) => runtimeMapOps({ operations, conflicts: [] } as never, current);
    expect(ops([{ kind: 'create_server', backend: 's1', server }, entry])).toHaveLength(2);
    // An endpoint move too (a delete and an add at runtime, unless its server carries streams: busyMoves).
    expect(ops([{ kind: 'update_server', backend: 's1', server, changes: [] }])).toHaveLength(1);
    expect(ops([{ kind: 'create_server', backend: 'hashed', server }])).toBeUndefined();
    expect(
      ops([{ kind: 'create_backend', backend: { name: 's2', balance: 'leastconn' } }, entry]),
    ).toBeUndefined();
    expect(ops([{ ...entry, map: 'other.map' }])).toBeUndefined();
    // Rules routing: the server goes into the configuration.
    const rules = { ...current, frontends: [{ ...current.frontends[0], sniMap: null }] };
    expect(
      runtimeMapOps(
        { operations: [{ kind: 'create_server', backend: 's1', server }], conflicts: [] } as never,
        rules as never,
      ),
    ).toBeUndefined();
  });
});
