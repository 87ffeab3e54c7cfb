import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { RenderOptions } from '../../src/haproxy/render.js';
import { renderDesired } from '../../src/haproxy/render.js';
import { ConcurrentChangeError, ReloadFailedError, TerminalError } from '../../src/model/errors.js';
import { plan } from '../../src/plan/plan.js';
import type { Reading } from '../../src/plan/reading.js';
import { createClient } from '../../src/providers/dataplaneapi/client.js';
import {
  DataplaneProvider,
  type DataplaneProviderOptions,
} from '../../src/providers/dataplaneapi/provider.js';
import { LEDGER_FILE, sweepTransactions } from '../../src/providers/dataplaneapi/sweep.js';
import { OwnedProvider } from '../../src/registry/owned-provider.js';
import { type RouteClaim, resolveRoutes } from '../../src/routes/route.js';
import { type FakeVersion, startFakeDataplaneApi } from '../support/fake-dataplaneapi.js';
import {
  claim,
  FOREIGN_TEXT,
  mapRender,
  providerOn,
  SNI_MAP,
} from '../support/fake-dataplaneapi-provider.js';
import { manualClock } from '../support/manual-clock.js';
import { registry } from '../support/owner.js';
import { waitFor } from '../support/wait.js';

const signal = () => AbortSignal.timeout(10_000);
const STORED_MAP = 'kubebyon-haproxy-adapter_sni.map';

/** A provider behind the registry against a fake API, and a pass as the loop makes one. */
async function bed(
  options: {
    version?: FakeVersion;
    haproxy?: string;
    extra?: Partial<DataplaneProviderOptions>;
    minSlots?: number;
  } = {},
) {
  const fake = await startFakeDataplaneApi({
    ...(options.version ? { version: options.version } : {}),
    ...(options.haproxy ? { haproxy: options.haproxy } : {}),
  });
  fake.reset(FOREIGN_TEXT);
  const inner = providerOn(fake, options.extra);
  const owned = new OwnedProvider(inner, registry);
  const render: RenderOptions = mapRender(options.minSlots ?? 4);
  const pass = async (claims: RouteClaim[], fresh = false, grow: 'ahead' | 'when_needed' = 'when_needed') => {
    const reading = await owned.read(signal(), { fresh });
    const p = plan(renderDesired(resolveRoutes(claims).routes, render), reading.state, { grow });
    const report = await owned.apply(p, reading, signal());
    return { p, report, reading };
  };
  const routes = async (): Promise<Reading> => new OwnedProvider(providerOn(fake), registry).read(signal());
  const since = (n: number) => fake.requests.slice(n);
  return {
    fake,
    inner,
    owned,
    render,
    pass,
    routes,
    since,
    close: async () => {
      await inner.close();
      await fake.close();
    },
  };
}

type Bed = Awaited<ReturnType<typeof bed>>;
const writes = (requests: string[]) => requests.filter((r) => !r.startsWith('GET '));
const entriesOf = (r: Reading) => r.state.maps?.find((m) => m.name === SNI_MAP)?.entries ?? new Map();

describe('Data Plane API provider, against a fake API checked by its OpenAPI document', () => {
  let b: Bed;
  afterEach(async () => {
    expect(b.fake.violations).toEqual([]);
    await b.close();
  });

  it('an install is one push of the file, loaded by one reload, the map files stored first; no transaction at all', async () => {
    b = await bed();
    const start = b.fake.requests.length;
    await b.pass([claim('a')], true, 'ahead');
    const sent = writes(b.since(start));
    // The SNI map and each slot's own allow map (authorized networks: open), then the configuration.
    const slots = [...b.fake.runtime.storage.keys()].filter((n) => n.includes('_allow_')).sort();
    expect(slots).toEqual(
      [1, 2, 3, 4].map((n) => `kubebyon-haproxy-adapter_allow_kubebyon_slot_0000${n}.map`),
    );
    for (const n of slots) expect(b.fake.runtime.storage.get(n)).toBe('0.0.0.0/0 1\n::/0 1\n');
    expect(sent.map((r) => r.replace(/\?.*$/, ''))).toEqual([
      ...Array.from({ length: 1 + slots.length }, () => 'POST /services/haproxy/storage/maps'),
      'POST /services/haproxy/configuration/raw',
    ]);
    expect(sent.at(-1)).toMatch(/force_reload=true/);
    expect(b.fake.requests.some((r) => r.includes('/transactions') && !r.startsWith('GET'))).toBe(false);
    expect(b.fake.reloads).toBe(1);
    // Every other line of the file is as it was.
    expect(b.fake.text.startsWith(FOREIGN_TEXT)).toBe(true);
    expect(entriesOf(await b.routes()).get('a.example.com')).toBe('kubebyon_slot_00001');
  });

  it("reads the refusals table through the API's runtime stick tables", async () => {
    b = await bed();
    b.fake.runtime.tables.set('kubebyon_refusals', new Map([['kubebyon_slot_00001', 4]]));
    expect(await b.owned.refusals('kubebyon_refusals', signal())).toEqual(
      new Map([['kubebyon_slot_00001', 4]]),
    );
    await expect(b.owned.refusals('none_here', signal())).rejects.toThrow();
    expect(b.fake.violations).toEqual([]);
    await b.close();
  });

  it('a new route is runtime only, the same few requests at any N; the files follow in one push without a reload', async () => {
    b = await bed({ minSlots: 40 });
    const many = Array.from({ length: 30 }, (_, i) => claim(`c${i}`, 30100 + i));
    await b.pass(many, true, 'ahead');
    await b.inner.persisted();
    const reloads = b.fake.reloads;
    const start = b.fake.requests.length;
    await b.pass([...many, claim('new', 30999)]);
    const sent = b.since(start).map((r) => r.replace(/\?.*$/, ''));
    expect(sent).toEqual([
      // One look at the revision in the pass and one in the apply: the runtime's info, whose answer carries
      // the configuration's version.
      'GET /services/haproxy/runtime/info',
      'GET /services/haproxy/runtime/info',
      'POST /services/haproxy/runtime/backends/kubebyon_slot_00031/servers',
      'PUT /services/haproxy/runtime/backends/kubebyon_slot_00031/servers/srv1',
      `POST /services/haproxy/runtime/maps/${STORED_MAP}/entries`,
    ]);
    expect(b.fake.reloads).toBe(reloads);
    const pushes = b.fake.pushes;
    await b.inner.persisted();
    expect(b.fake.pushes).toBe(pushes + 1);
    expect(b.fake.reloads).toBe(reloads);
    expect(b.fake.runtime.storage.get(STORED_MAP)).toContain('new.example.com kubebyon_slot_00031');
    expect(b.fake.text).toMatch(
      /backend kubebyon_slot_00031[^\n]*\n(?: .*\n)* {2}server srv1 127\.0\.0\.1:30999/,
    );
    // A reload by someone else now loses nothing.
    b.fake.reload();
    expect(entriesOf(await b.routes()).get('new.example.com')).toBe('kubebyon_slot_00031');
    expect(b.fake.text.startsWith(FOREIGN_TEXT)).toBe(true);
  });

  it('a read between a runtime change and its persistence: the new server is written with its tags', async () => {
    b = await bed({ extra: { persistDelayMs: 60_000 } });
    await b.pass([claim('a')], true, 'ahead');
    await b.inner.persisted();
    await b.pass([claim('a'), claim('b', 30222)]);
    // A resync reads before the files hold the new server: the files are behind what runs, and are written.
    await b.owned.read(signal(), { fresh: true });
    await b.inner.persisted();
    expect(b.fake.text).toMatch(/ {2}server \S+ 127\.0\.0\.1:30222[^\n]*# \{"owner"/);
  });

  it('answers a pass from the last reading while nothing but itself changed HAProxy; another writer or a reload moves the revision', async () => {
    b = await bed();
    await b.pass([claim('a')], true, 'ahead');
    await b.pass([claim('a'), claim('b', 30002)]);
    await b.inner.persisted();
    const token = await b.owned.revision(signal());
    const kept = await b.owned.read(signal());
    expect(await b.owned.read(signal())).toBe(kept);
    b.fake.write(`${b.fake.text}\nbackend by_hand\n  mode tcp\n`);
    expect(await b.owned.revision(signal())).not.toBe(token);
    expect(await b.owned.read(signal())).not.toBe(kept);
    const after = await b.owned.revision(signal());
    b.fake.reload();
    expect(await b.owned.revision(signal())).not.toBe(after);
  });

  it('a runtime change does not wait behind a persistence under way, and the version that write moves is not counted as someone else’s', async () => {
    b = await bed({ extra: { persistDelayMs: 60_000 }, minSlots: 10 });
    await b.pass([claim('a')], true, 'ahead');
    await b.inner.persisted();
    await b.pass([claim('a'), claim('b', 30002)]);
    const token = await b.owned.revision(signal());
    // The persistence's push is carried out at once and answered 3 s later (a long parse at thousands of slots).
    b.fake.slow = [{ method: 'POST', path: /\/configuration\/raw$/, ms: 3_000 }];
    const pushes = b.fake.pushes;
    let persisted = false;
    const persisting = b.inner.persisted().then(() => {
      persisted = true;
    });
    await waitFor(() => b.fake.pushes > pushes, 5_000, 'the persistence to push', { everyMs: 5 });
    const { report } = await b.pass([claim('a'), claim('b', 30002), claim('c', 30003)]);
    expect(report.reload).toBe('none');
    expect(persisted).toBe(false);
    expect(b.fake.runtime.entries.get(STORED_MAP)?.get('c.example.com')).toMatch(/^kubebyon_slot_/);
    await persisting;
    b.fake.slow = [];
    // Only our own writes moved the version: the same revision as before them.
    expect(await b.owned.revision(signal())).toBe(token);
    await b.inner.persisted();
    expect(b.fake.text).toMatch(/server srv1 127\.0\.0\.1:30003/);
  });

  it('a plan made before someone else wrote the file is refused as a concurrent change, and nothing is pushed', async () => {
    b = await bed();
    await b.pass([claim('a')], true, 'ahead');
    const reading = await b.owned.read(signal());
    b.fake.write(`${b.fake.text}\nbackend by_hand\n  mode tcp\n`);
    const p = plan(
      renderDesired(resolveRoutes([claim('a'), claim('b', 30002)]).routes, b.render),
      reading.state,
    );
    const pushes = b.fake.pushes + b.fake.reloads;
    await expect(b.owned.apply(p, reading, signal())).rejects.toThrow(ConcurrentChangeError);
    expect(b.fake.pushes + b.fake.reloads).toBe(pushes);
    // Read again, planned again: applied.
    await b.pass([claim('a'), claim('b', 30002)], true);
    expect(entriesOf(await b.routes()).get('b.example.com')).toBeDefined();
  });

  it('a move of a server carrying a stream: refused at runtime, then moved in place by the file, no reload', async () => {
    b = await bed();
    await b.pass([claim('a')], true, 'ahead');
    b.fake.runtime.busy.add('kubebyon_slot_00001/srv1');
    await expect(b.pass([claim('a', 31001)])).rejects.toThrow(/carry streams/);
    const reloads = b.fake.reloads;
    const start = b.fake.requests.length;
    await b.pass([claim('a', 31001)], true);
    expect(writes(b.since(start)).map((r) => r.replace(/\?.*$/, ''))).toEqual([
      'POST /services/haproxy/configuration/raw',
    ]);
    expect(b.fake.reloads).toBe(reloads);
    const slot = (await b.routes()).backend('kubebyon_slot_00001');
    expect(slot?.servers.map((s) => s.port)).toEqual([31001]);
  });

  it('a deleted route whose server carries a stream: the entry goes, the server drains in maintenance and stays out of the files', async () => {
    b = await bed();
    await b.pass([claim('a')], true, 'ahead');
    await b.inner.persisted();
    b.fake.runtime.busy.add('kubebyon_slot_00001/srv1');
    await b.pass([]);
    await b.inner.persisted();
    expect(entriesOf(await b.routes()).size).toBe(0);
    expect(b.fake.text).not.toMatch(/server srv1 127\.0\.0\.1:30001/);
    // Once its stream is gone, a pass deletes it.
    b.fake.runtime.busy.clear();
    await b.pass([], true);
    expect((await b.routes()).backend('kubebyon_slot_00001')?.servers).toEqual([]);
  });

  it('on HAProxy 2.6 (its runtime servers cannot be driven through the API) every change is a push and a reload', async () => {
    b = await bed({ haproxy: '2.6.12-1+deb12u4' });
    await b.pass([claim('a')], true, 'ahead');
    const reloads = b.fake.reloads;
    const start = b.fake.requests.length;
    await b.pass([claim('a'), claim('b', 30002)]);
    expect(b.since(start).some((r) => r.includes('/runtime/backends'))).toBe(false);
    expect(b.fake.reloads).toBe(reloads + 1);
    expect(entriesOf(await b.routes()).get('b.example.com')).toBe('kubebyon_slot_00002');
  });

  it('a push whose reload HAProxy refuses: ReloadFailedError with its words, and the file on disk loaded again before the next read', async () => {
    b = await bed();
    b.fake.inject({
      method: 'POST',
      path: /configuration\/raw$/,
      apply: true,
      answer: {
        status: 400,
        headers: {},
        body: {
          code: 400,
          message:
            'Reload failed: failed to reload configuration, [ALERT]    (1) : Starting frontend kubebyon_sni: cannot bind socket (Address already in use) [127.0.0.1:18443]',
        },
      },
    });
    const failed = await b.pass([claim('a')], true, 'ahead').catch((e: unknown) => e);
    expect(failed).toBeInstanceOf(ReloadFailedError);
    expect(String(failed)).toMatch(/cannot bind socket/);
    const reloads = b.fake.reloads;
    await b.owned.read(signal(), { fresh: true });
    expect(b.fake.reloads).toBe(reloads + 1);
  });

  it('401 is terminal, names the credentials, and never repeats the password v3.0.23 echoes', async () => {
    b = await bed({ version: '3.0.23' });
    const wrong = providerOn(b.fake, { password: 'not-the-password' });
    const err = await wrong.read(signal()).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(TerminalError);
    expect(String(err)).toMatch(/KUBEBYON_DATAPLANE_USERNAME and KUBEBYON_DATAPLANE_PASSWORD/);
    expect(String(err)).not.toMatch(/not-the-password/);
    await wrong.close();
  });

  it('v3.0.23: tags in descriptions of sections and metadata of servers, read back as ours', async () => {
    b = await bed({ version: '3.0.23' });
    await b.pass([claim('a')], true, 'ahead');
    await b.inner.persisted();
    expect(b.fake.text).toMatch(
      /^frontend kubebyon_sni\n {2}description kubebyon owner=kubebyon-haproxy-adapter$/m,
    );
    expect(b.fake.text).not.toMatch(/^frontend kubebyon_sni #/m);
    const r = await b.routes();
    expect(r.frontend('kubebyon_sni')?.owned).toBe(true);
    expect(r.backend('kubebyon_slot_00001')?.servers.map((s) => s.owned)).toEqual([true]);
  });
});

const clientOf = (fake: { url: string; username: string; password: string }) =>
  createClient({ url: fake.url, username: fake.username, password: fake.password, timeoutMs: 5_000 });

describe('Data Plane API provider at start', () => {
  let dir: string;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'kubebyon-dpapi-'));
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it('deletes the transactions an older release listed in its ledger and those that can never commit; keeps the rest', async () => {
    const fake = await startFakeDataplaneApi();
    fake.reset(FOREIGN_TEXT);
    const now = fake.version();
    fake.transactions = [
      { id: 'ours-left-by-a-kill', _version: now, status: 'in_progress' },
      { id: 'outdated', _version: now - 1, status: 'in_progress' },
      { id: 'another-tool-at-work', _version: now, status: 'in_progress' },
    ];
    writeFileSync(join(dir, LEDGER_FILE), JSON.stringify({ api: fake.url, open: ['ours-left-by-a-kill'] }));
    const provider = providerOn(fake, { ledgerFile: join(dir, LEDGER_FILE) });
    await provider.ready(signal());
    expect(fake.transactions.map((t) => t.id)).toEqual(['another-tool-at-work']);
    expect(existsSync(join(dir, LEDGER_FILE))).toBe(false);
    await provider.close();
    await fake.close();
  });

  it('after an API that went away mid-push, deletes only the transactions of that push once past them', async () => {
    const fake = await startFakeDataplaneApi();
    fake.reset(FOREIGN_TEXT);
    const now = fake.version();
    // What a kill of the API mid-push leaves (a transaction of the version pushed at), and another tool's.
    fake.transactions = [
      { id: 'left-by-our-push', _version: now, status: 'in_progress' },
      { id: 'another-tool-older', _version: now - 1, status: 'in_progress' },
    ];
    const client = clientOf(fake);
    await sweepTransactions(client, undefined, pino({ level: 'silent' }), signal(), new Set([now]));
    // Not outdated yet: nothing goes.
    expect(fake.transactions.map((t) => t.id)).toEqual(['left-by-our-push', 'another-tool-older']);
    fake.write(`${FOREIGN_TEXT}\n# moved on\n`);
    await sweepTransactions(client, undefined, pino({ level: 'silent' }), signal(), new Set([now]));
    client.close();
    // Ours, now outdated, goes; the other tool's outdated one is not ours to judge here (the start's sweep is).
    expect(fake.transactions.map((t) => t.id)).toEqual(['another-tool-older']);
    await fake.close();
  });

  it('refuses an API whose document lacks what it needs, naming it', async () => {
    const fake = await startFakeDataplaneApi();
    const spec = structuredClone(fake.spec) as { paths: Record<string, unknown> };
    delete spec.paths['/services/haproxy/configuration/raw'];
    const bare = await startFakeDataplaneApi({ spec });
    const provider = providerOn(bare);
    await expect(provider.ready(signal())).rejects.toThrow(/configuration\/raw/);
    await provider.close();
    await bare.close();
    await fake.close();
  });

  it('starts while the API is unreachable; ping then fails without being terminal', async () => {
    const provider = new DataplaneProvider({
      url: 'http://127.0.0.1:9',
      username: 'admin',
      password: 'x',
      timeoutMs: 500,
      reloadTimeoutMs: 1000,
      owner: registry,
      logger: pino({ level: 'silent' }),
    });
    const err = await provider.ping(signal()).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Error);
    expect(err).not.toBeInstanceOf(TerminalError);
    await provider.close();
  });
});

describe('Data Plane API persistence, on a manual clock', () => {
  it('writes the files once per burst: the persist delay after the last change, never more than 1 s after the first', async () => {
    const { clock, advance } = manualClock(Date.now());
    const b = await bed({ extra: { clock, persistDelayMs: 300 }, minSlots: 10 });
    await b.pass([claim('a')], true, 'ahead');
    const pushes = () => b.fake.pushes;
    // The write's own requests take real time: what the clock started is awaited, what it did not start is not there.
    const settled = async (want: number) => {
      await waitFor(() => pushes() >= want, 5_000, `${want} pushes`, { everyMs: 5 });
      await new Promise((r) => setTimeout(r, 50));
      return pushes();
    };
    const start = pushes();
    const claims = [claim('a')];
    // A change every 200 ms: never quiet for 300 ms, written at the 1 s bound.
    for (let i = 0; i < 4; i++) {
      claims.push(claim(`c${i}`, 30100 + i));
      await b.pass(claims);
      await advance(200);
    }
    expect(await settled(start)).toBe(start);
    await advance(250);
    expect(await settled(start + 1)).toBe(start + 1);
    // Quiet afterwards: the rest 300 ms after the last change.
    await b.pass([...claims, claim('late', 30999)]);
    await advance(299);
    expect(await settled(start + 1)).toBe(start + 1);
    await advance(2);
    expect(await settled(start + 2)).toBe(start + 2);
    expect(b.fake.text).toMatch(/server srv1 127\.0\.0\.1:30999/);
    await b.close();
  });
});
