import fc from 'fast-check';
import { afterEach, describe, expect, it } from 'vitest';
import type { RawBackend } from '../../src/haproxy/model.js';
import { renderDesired } from '../../src/haproxy/render.js';
import { plan } from '../../src/plan/plan.js';
import { createClient } from '../../src/providers/dataplaneapi/client.js';
import { readConfigText } from '../../src/providers/dataplaneapi/config-text.js';
import { storageName } from '../../src/providers/dataplaneapi/map-names.js';
import type { DataplaneProviderOptions } from '../../src/providers/dataplaneapi/provider.js';
import {
  parseSlots,
  renderSlots,
  SHARD_SIZE,
  SlotsFile,
  shardOf,
  slotsFileName,
} from '../../src/providers/dataplaneapi/slots.js';
import { OwnedProvider } from '../../src/registry/owned-provider.js';
import { type RouteClaim, resolveRoutes } from '../../src/routes/route.js';
import { type FakeDataplaneApi, startFakeDataplaneApi } from '../support/fake-dataplaneapi.js';
import {
  claim,
  FOREIGN_TEXT,
  mapRender,
  providerOn,
  SNI_MAP,
} from '../support/fake-dataplaneapi-provider.js';
import { registry } from '../support/owner.js';
import { PROPERTY_TIMEOUT_MS } from '../support/property.js';

const signal = () => AbortSignal.timeout(10_000);
const FILE = `${slotsFileName(registry.id)}_000.cfg`;
const render = mapRender(8);

/** A fake Data Plane API and a client of it. */
async function fakeClient() {
  const fake = await startFakeDataplaneApi();
  const client = createClient({
    url: fake.url,
    username: fake.username,
    password: fake.password,
    timeoutMs: 5_000,
  });
  return {
    fake,
    client,
    close: async () => {
      client.close();
      await fake.close();
    },
  };
}

describe('the slots files, as text', () => {
  const name = fc.stringMatching(/^[a-z][a-z0-9_.-]{0,20}$/);
  const server = fc.record({
    name,
    address: fc.oneof(fc.ipV4(), fc.constant('::1'), fc.constant('fd00::5')),
    port: fc.integer({ min: 1, max: 65535 }),
    check: fc.boolean(),
    tags: fc.constantFrom({}, registry.tags()),
  });
  const backend = fc.record({
    name,
    balance: fc.constantFrom('leastconn', 'roundrobin'),
    servers: fc.uniqueArray(server, { selector: (s) => s.name, maxLength: 3 }),
    tags: fc.constantFrom({}, registry.tags()),
  });

  it('reads back what it wrote, in name order (200 random files)', { timeout: PROPERTY_TIMEOUT_MS }, () => {
    fc.assert(
      fc.property(fc.uniqueArray(backend, { selector: (b) => b.name, maxLength: 6 }), (backends) => {
        const sorted = [...backends].sort((a, b) => (a.name < b.name ? -1 : 1));
        expect(parseSlots(renderSlots(backends))).toEqual(sorted);
      }),
      { numRuns: 200 },
    );
  });

  it('refuses to write values that could inject configuration; names files safely', () => {
    const bad: RawBackend = { name: 'b\n  bind :80', balance: 'leastconn', servers: [], tags: {} };
    expect(() => renderSlots([bad])).toThrow();
    expect(slotsFileName('team a/b')).toBe('team_a_b_slots');
  });

  it('one file per SHARD_SIZE slots; a change of servers sends only the file its slot is in', async () => {
    const { fake, client, close } = await fakeClient();
    const files = new SlotsFile(client, 'kb_slots', 5_000);
    const counter = { requests: 0 };
    const name = (n: number) => `kb_slot_${String(n).padStart(5, '0')}`;
    const slot = (n: number): RawBackend => ({
      name: name(n),
      balance: 'leastconn',
      servers: [],
      tags: registry.tags(),
    });
    const all = Array.from({ length: 2 * SHARD_SIZE + 10 }, (_, i) => slot(i + 1));
    expect([shardOf('kb_slot_00001'), shardOf(name(SHARD_SIZE + 1)), shardOf('kb_other')]).toEqual([0, 1, 0]);
    expect(await files.write(all, 'skip', signal(), counter)).toBe(true);
    expect([...fake.runtime.general.keys()].sort()).toEqual([
      'kb_slots_000.cfg',
      'kb_slots_001.cfg',
      'kb_slots_002.cfg',
    ]);
    fake.requests.length = 0;
    const changed = all.map((b) =>
      b.name === name(SHARD_SIZE + 5)
        ? {
            ...b,
            servers: [
              { name: 'srv1', address: '127.0.0.1', port: 30001, check: false, tags: registry.tags() },
            ],
          }
        : b,
    );
    // Only the file holding the changed backend is written.
    expect(await files.write(changed, 'skip', signal(), counter)).toBe(true);
    expect(fake.requests.filter((r) => !r.startsWith('GET '))).toEqual([
      'PUT /services/haproxy/storage/general/kb_slots_001.cfg?skip_reload=true',
    ]);
    const again = new SlotsFile(client, 'kb_slots', 5_000);
    const read = await again.backends(signal(), counter, true);
    expect(read.size).toBe(all.length);
    expect(read.get(name(SHARD_SIZE + 5))?.servers.map((s) => s.port)).toEqual([30001]);
    expect(await files.write([...(files.current?.values() ?? [])], 'skip', signal(), counter)).toBe(false);
    await close();
  });

  it('an update renders and sends only the files of the backends it names, as a full write would leave them', async () => {
    const { fake, client, close } = await fakeClient();
    const name = (n: number) => `kb_slot_${String(n).padStart(5, '0')}`;
    const srv = (port: number, n = 1) => ({
      name: `srv${n}`,
      address: '127.0.0.1',
      port,
      check: false,
      tags: registry.tags(),
    });
    const slot = (n: number, servers = [srv(30000 + n)]): RawBackend => ({
      name: name(n),
      balance: 'leastconn',
      servers,
      tags: registry.tags(),
    });
    const counter = { requests: 0 };
    const files = new SlotsFile(client, 'kb_slots', 5_000);
    // Nothing held yet: the caller must write all.
    expect(await files.update([name(1)], () => undefined, new Set(), signal(), counter)).toBeUndefined();
    const all = Array.from({ length: 2 * SHARD_SIZE + 10 }, (_, i) => slot(i + 1));
    await files.write(all, 'skip', signal(), counter);
    // Slot 3 moves, slot SHARD_SIZE + 5 goes, a new slot comes in the last file, slot 7 gets a server that
    // is left draining, and the first file's slot 9 is named without a change.
    const next = new Map(all.map((b) => [b.name, b]));
    next.set(name(3), slot(3, [srv(31003)]));
    next.delete(name(SHARD_SIZE + 5));
    next.set(name(2 * SHARD_SIZE + 11), slot(2 * SHARD_SIZE + 11));
    next.set(name(7), slot(7, [srv(30007), srv(31007, 2)]));
    const draining = new Set([`${name(7)}/srv2`]);
    const names = [3, SHARD_SIZE + 5, 2 * SHARD_SIZE + 11, 7, 9].map(name);
    fake.requests.length = 0;
    expect(await files.update(names, (n) => next.get(n), draining, signal(), counter)).toBe(true);
    expect(fake.requests.filter((r) => !r.startsWith('GET ')).sort()).toEqual([
      'PUT /services/haproxy/storage/general/kb_slots_000.cfg?skip_reload=true',
      'PUT /services/haproxy/storage/general/kb_slots_001.cfg?skip_reload=true',
      'PUT /services/haproxy/storage/general/kb_slots_002.cfg?skip_reload=true',
    ]);
    const expected = [...next.values()]
      .map((b) => (b.name === name(7) ? slot(7) : b))
      .sort((a, b) => (a.name < b.name ? -1 : 1));
    const read = await new SlotsFile(client, 'kb_slots', 5_000).backends(signal(), counter, true);
    expect([...read.values()]).toEqual(expected);
    // What the update left is what a full write of the same backends leaves: nothing more to send.
    fake.requests.length = 0;
    expect(await files.write(expected, 'skip', signal(), counter)).toBe(false);
    expect(await files.update([name(9)], (n) => next.get(n), draining, signal(), counter)).toBe(false);
    expect(fake.requests.filter((r) => !r.startsWith('GET '))).toEqual([]);
    await close();
  });
});

describe('Data Plane API provider with the slots in its general storage (fake API)', () => {
  let fake: FakeDataplaneApi;
  const providers: Array<{ close(): Promise<void> }> = [];
  afterEach(async () => {
    for (const p of providers.splice(0)) await p.close();
    expect(fake.violations).toEqual([]);
    await fake.close();
  });
  const open = (extra: Partial<DataplaneProviderOptions> = { slots: 'storage' }) => {
    const inner = providerOn(fake, { persistDelayMs: 20, ...extra });
    providers.push(inner);
    return { inner, owned: new OwnedProvider(inner, registry) };
  };
  async function converge(p: ReturnType<typeof open>, claims: RouteClaim[], fresh = false) {
    const reading = await p.owned.read(signal(), { fresh });
    const made = plan(renderDesired(resolveRoutes(claims).routes, render), reading.state, {
      grow: 'when_needed',
    });
    return { plan: made, report: await p.owned.apply(made, reading, signal()) };
  }
  const writes = () => fake.requests.filter((r) => !r.startsWith('GET '));
  const file = () => fake.runtime.general.get(FILE) ?? '';
  const configSlots = () =>
    readConfigText(fake.text, (f) => f, 'kubebyon-haproxy-adapter.allow.map').backends.filter((b) =>
      /slot_/.test(b.name),
    );
  const entries = () => [...(fake.runtime.entries.get(storageName(SNI_MAP))?.keys() ?? [])].sort();
  const start = async () => {
    fake = await startFakeDataplaneApi();
    fake.reset(FOREIGN_TEXT);
  };

  it('an install puts the slots in the files, loaded by a reload; the configuration never names them', async () => {
    await start();
    const p = open();
    await converge(p, [claim('one')], true);
    expect(parseSlots(file())).toHaveLength(render.minSlots);
    expect(file()).toMatch(
      /^backend \S+slot_00001 # .*\n {2}mode tcp\n {2}balance leastconn\n {2}acl kb_allowed src,map_ip\(\S+_allow_kubebyon_slot_00001\.map\) -m str 1\n(?: {2}tcp-request .*\n){2} {2}server srv1 127\.0\.0\.1:30001/m,
    );
    expect(configSlots()).toEqual([]);
    expect(entries()).toEqual(['one.example.com']);
    expect((await converge(p, [claim('one')], true)).plan.operations).toEqual([]);
  });

  it('a new route runs at runtime and reaches the files, not the configuration, without a reload', async () => {
    await start();
    const p = open();
    await converge(p, [claim('one')], true);
    await p.inner.persisted();
    const reloads = fake.reloads;
    fake.requests.length = 0;
    expect((await converge(p, [claim('one'), claim('two', 30002)])).report.reload).toBe('none');
    await p.inner.persisted();
    expect(writes().filter((r) => r.includes('/runtime/'))).toHaveLength(3);
    expect(writes().some((r) => r.includes('configuration/raw'))).toBe(false);
    expect(writes()).toContainEqual(`PUT /services/haproxy/storage/general/${FILE}?skip_reload=true`);
    expect(file()).toMatch(/ server srv1 127\.0\.0\.1:30002/);
    expect(fake.reloads).toBe(reloads);
    fake.reload();
    expect((await converge(p, [claim('one'), claim('two', 30002)], true)).plan.operations).toEqual([]);
  });

  it('an install with its slots in the configuration moves them to the files with one reload, routes kept', async () => {
    await start();
    const before = open({ slots: 'config' });
    const three = [claim('one'), claim('two', 30002), claim('three', 30003)];
    await converge(before, three, true);
    await before.inner.persisted();
    expect(configSlots()).toHaveLength(render.minSlots);
    const reloads = fake.reloads;
    const p = open();
    const moved = await converge(p, three, true);
    expect(moved.plan.operations).toEqual([]);
    expect(fake.reloads).toBe(reloads + 1);
    expect(configSlots()).toEqual([]);
    const inFile = parseSlots(file());
    expect(inFile).toHaveLength(render.minSlots);
    expect(inFile.flatMap((b) => b.servers.map((s) => s.port)).sort()).toEqual([30001, 30002, 30003]);
    expect(entries()).toEqual(['one', 'three', 'two'].map((x) => `${x}.example.com`));
    expect(fake.text.startsWith(FOREIGN_TEXT)).toBe(true);
  });

  it('refuses, with the fix, when HAProxy does not load the files; a move out is put back', async () => {
    await start();
    fake.runtime.loadsGeneral = false;
    await expect(converge(open(), [claim('one')], true)).rejects.toThrow(
      /second -f .*general storage directory/,
    );
    // An install whose slots are in the configuration keeps them there, and its routes.
    fake.reset(FOREIGN_TEXT);
    fake.runtime.loadsGeneral = false;
    const before = open({ slots: 'config' });
    await converge(before, [claim('one'), claim('two', 30002)], true);
    await before.inner.persisted();
    const p = open();
    await expect(p.owned.read(signal(), { fresh: true })).rejects.toThrow(/does not load the slots files/);
    expect(configSlots()).toHaveLength(render.minSlots);
    expect(parseSlots(file())).toEqual([]);
    expect(entries()).toEqual(['one.example.com', 'two.example.com']);
    expect(
      configSlots()
        .flatMap((b) => b.servers.map((s) => s.port))
        .sort(),
    ).toEqual([30001, 30002]);
  });
});
