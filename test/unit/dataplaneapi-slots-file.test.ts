import fc from 'fast-check';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { RawBackend } from '../../src/haproxy/model.js';
import { renderDesired } from '../../src/haproxy/render.js';
import { plan } from '../../src/plan/plan.js';
import { createClient } from '../../src/providers/dataplaneapi/client.js';
import { storageName } from '../../src/providers/dataplaneapi/map-names.js';
import type { DataplaneProvider } from '../../src/providers/dataplaneapi/provider.js';
import {
  parseSlots,
  renderSlots,
  SHARD_SIZE,
  SlotsFile,
  shardOf,
  slotsFileName,
} from '../../src/providers/dataplaneapi/slots-file.js';
import { type RouteClaim, resolveRoutes } from '../../src/routes/route.js';
import { type FakeDataplaneApi, startFakeDataplaneApi } from '../support/fake-dataplaneapi.js';
import { claim, mapRender, providerOn, SNI_MAP } from '../support/fake-dataplaneapi-provider.js';
import { interpret, registry } from '../support/owner.js';
import { PROPERTY_TIMEOUT_MS } from '../support/property.js';
import { waitFor } from '../support/wait.js';

const signal = () => AbortSignal.timeout(10_000);
const FILE = `${slotsFileName(registry.id)}_000.cfg`;
const render = mapRender(8);

describe('the slots file, as text', () => {
  const name = fc.stringMatching(/^[a-z][a-z0-9_.-]{0,20}$/);
  const server = fc.record({
    name,
    address: fc.oneof(fc.ipV4(), fc.constant('::1'), fc.constant('fd00::5')),
    port: fc.integer({ min: 1, max: 65535 }),
    check: fc.boolean(),
    tags: fc.constantFrom({}, registry.tags(), registry.tags('demo')),
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

  it('refuses what it did not write: other sections, unknown lines, and values that could inject', () => {
    expect(() => parseSlots('frontend f\n  bind :443\n')).toThrow(/frontend section/);
    expect(() => parseSlots('backend b\n  http-request deny\n')).toThrow(/cannot read/);
    const bad: RawBackend = { name: 'b\n  bind :80', balance: 'leastconn', servers: [], tags: {} };
    expect(() => renderSlots([bad])).toThrow();
    expect(slotsFileName('team a/b')).toBe('team_a_b_slots');
  });
});

describe('the slots files in the storage, against the fake API', () => {
  let fake: FakeDataplaneApi;
  beforeAll(async () => {
    fake = await startFakeDataplaneApi();
  });
  afterAll(async () => {
    await fake?.close();
  });

  it('one file per SHARD_SIZE slots; a change of servers sends only the file its slot is in', async () => {
    fake.reset({});
    const client = createClient({
      url: fake.url,
      username: fake.username,
      password: fake.password,
      timeoutMs: 5_000,
    });
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
    const servers = new Map([
      [
        name(SHARD_SIZE + 5),
        [{ name: 'srv1', address: '127.0.0.1', port: 30001, check: false, tags: registry.tags() }],
      ],
    ]);
    await files.writeServers(servers, signal(), counter);
    expect(fake.requests.filter((r) => !r.startsWith('GET '))).toEqual([
      'PUT /services/haproxy/storage/general/kb_slots_001.cfg?skip_reload=true',
    ]);
    // Read back by another process: the same backends.
    const again = new SlotsFile(client, 'kb_slots', 5_000);
    const read = await again.backends(signal(), counter, true);
    expect(read.size).toBe(all.length);
    expect(read.get(name(SHARD_SIZE + 5))?.servers.map((s) => s.port)).toEqual([30001]);
    expect(await files.write([...(files.current?.values() ?? [])], 'skip', signal(), counter)).toBe(false);
    client.close();
  });
});

describe('dataplaneapi provider, slots in the general storage, against the fake API', () => {
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
    provider = providerOn(fake, { slots: 'storage', persistDebounceMs: 20, persistMaxDelayMs: 200 });
  });
  afterEach(async () => {
    await provider.close();
    expect(fake.violations).toEqual([]);
  });

  async function converge(claims: RouteClaim[], options: { fresh?: boolean } = {}) {
    const current = await provider.readState(signal(), options);
    const p = plan(renderDesired(resolveRoutes(claims).routes, render), interpret(current));
    return { plan: p, report: await provider.apply(p, current, signal()) };
  }
  const writes = () => fake.requests.filter((r) => !r.startsWith('GET '));
  const file = () => fake.runtime.general.get(FILE) ?? '';
  const entries = () => [...(fake.runtime.entries.get(storageName(SNI_MAP))?.keys() ?? [])].sort();

  it('an install puts the slots in the file, loaded by a reload; the configuration never names them', async () => {
    await converge([claim('one')]);
    expect(parseSlots(file()).map((b) => b.name)).toHaveLength(render.minSlots ?? 0);
    expect(file()).toMatch(
      /^backend \S+slot_00001 # .*\n {2}mode tcp\n {2}balance leastconn\n {2}server srv1 127\.0\.0\.1:30001/m,
    );
    // The configuration holds the frontend and the closing backend only.
    expect([...fake.config.backends.keys()].some((n) => /slot_/.test(n))).toBe(false);
    expect(entries()).toEqual(['one.example.com']);
    const state = await provider.readState(signal(), { fresh: true });
    expect(state.backends.filter((b) => /slot_/.test(b.name))).toHaveLength(render.minSlots ?? 0);
    expect((await converge([claim('one')], { fresh: true })).plan.operations).toEqual([]);
  });

  it('a new route runs at runtime and reaches the file, not the configuration, without a reload', async () => {
    await converge([claim('one')]);
    await provider.persisted();
    const reloads = fake.reloads;
    fake.requests.length = 0;
    expect((await converge([claim('one'), claim('two', 30002)])).report.reload).toBe('none');
    await provider.persisted();
    expect(writes().filter((r) => r.includes('/runtime/'))).toHaveLength(3);
    expect(writes().some((r) => r.includes('configuration/raw'))).toBe(false);
    expect(writes()).toContainEqual(
      expect.stringMatching(new RegExp(`^PUT /services/haproxy/storage/general/${FILE}\\?skip_reload=true$`)),
    );
    expect(file()).toMatch(/ server srv1 127\.0\.0\.1:30002/);
    expect(fake.reloads).toBe(reloads);
    // A reload by anyone now comes back with both routes.
    fake.reload();
    const again = await converge([claim('one'), claim('two', 30002)], { fresh: true });
    expect(again.plan.operations).toEqual([]);
  });

  it('a plan past runtimeMaxRequests (a burst) is loaded by one reload from the files', async () => {
    await provider.close();
    provider = providerOn(fake, { slots: 'storage', runtimeMaxRequests: 8, persistDebounceMs: 20 });
    await converge([claim('one')]);
    await provider.persisted();
    const reloads = fake.reloads;
    fake.requests.length = 0;
    const two = [claim('one'), claim('two', 30002), claim('three', 30003)];
    expect((await converge(two)).report.reload).toBe('none');
    expect(writes().filter((r) => r.includes('/runtime/'))).toHaveLength(6);
    await provider.persisted();
    fake.requests.length = 0;
    const five = [...two, claim('four', 30004), claim('five', 30005), claim('six', 30006)];
    expect((await converge(five)).report.reload).toBe('succeeded');
    expect(writes().filter((r) => r.includes('/runtime/'))).toEqual([]);
    expect(writes().filter((r) => r.includes('/transactions') || r.includes('configuration/raw'))).toEqual(
      [],
    );
    expect(fake.reloads).toBe(reloads + 1);
    expect(entries()).toEqual(['five', 'four', 'one', 'six', 'three', 'two'].map((x) => `${x}.example.com`));
    expect((await converge(five, { fresh: true })).plan.operations).toEqual([]);
  });

  it('an install with slots in the configuration moves them to the file with one reload, routes kept', async () => {
    await provider.close();
    provider = providerOn(fake, { persistDebounceMs: 20 });
    await converge([claim('one'), claim('two', 30002)]);
    await converge([claim('one'), claim('two', 30002), claim('three', 30003)]);
    await provider.persisted();
    await provider.close();
    expect([...fake.config.backends.keys()].filter((n) => /slot_/.test(n))).toHaveLength(
      render.minSlots ?? 0,
    );
    const reloads = fake.reloads;
    provider = providerOn(fake, { slots: 'storage', persistDebounceMs: 20 });
    const moved = await converge([claim('one'), claim('two', 30002), claim('three', 30003)], { fresh: true });
    expect(moved.plan.operations).toEqual([]);
    expect(fake.reloads).toBe(reloads + 1);
    expect([...fake.config.backends.keys()].some((n) => /slot_/.test(n))).toBe(false);
    const inFile = parseSlots(file());
    expect(inFile).toHaveLength(render.minSlots ?? 0);
    expect(inFile.flatMap((b) => b.servers.map((s) => s.port)).sort()).toEqual([30001, 30002, 30003]);
    expect(entries()).toEqual(['one', 'three', 'two'].map((x) => `${x}.example.com`));
    // And on from there: a delete runs at runtime and leaves the file.
    expect((await converge([claim('one'), claim('three', 30003)])).report.reload).toBe('none');
    await provider.persisted();
    await waitFor(() => !file().includes(':30002'), 2_000, 'the deleted server gone from the file');
    expect(entries()).toEqual(['one', 'three'].map((x) => `${x}.example.com`));
  });
  it('refuses, with the fix, when HAProxy does not load the files; a move out is put back', async () => {
    fake.runtime.loadsGeneral = false;
    await expect(converge([claim('one')])).rejects.toThrow(/second -f .*general storage directory/);
    // An install whose slots are in the configuration keeps them there, and its routes.
    fake.reset({});
    fake.runtime.loadsGeneral = false;
    await provider.close();
    provider = providerOn(fake, { persistDebounceMs: 20 });
    await converge([claim('one'), claim('two', 30002)]);
    await provider.persisted();
    await provider.close();
    provider = providerOn(fake, { slots: 'storage', persistDebounceMs: 20 });
    await expect(provider.readState(signal(), { fresh: true })).rejects.toThrow(
      /does not load the slots files/,
    );
    expect([...fake.config.backends.keys()].filter((n) => /slot_/.test(n))).toHaveLength(
      render.minSlots ?? 0,
    );
    expect(parseSlots(file())).toEqual([]);
    expect(entries()).toEqual(['one.example.com', 'two.example.com']);
    const back = new Set(
      [...fake.config.backends.values()].flatMap((b) =>
        Object.values((b.servers ?? {}) as Record<string, { port: number }>).map((x) => x.port),
      ),
    );
    expect([...back].sort()).toEqual([30001, 30002]);
  });
});
