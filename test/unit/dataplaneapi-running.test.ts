import { afterEach, describe, expect, it } from 'vitest';
import { renderDesired } from '../../src/haproxy/render.js';
import { plan } from '../../src/plan/plan.js';
import type { DataplaneProvider } from '../../src/providers/dataplaneapi/provider.js';
import { PROBE_MAX } from '../../src/providers/dataplaneapi/runtime-reads.js';
import { OwnedProvider } from '../../src/registry/owned-provider.js';
import { type RouteClaim, resolveRoutes } from '../../src/routes/route.js';
import { type FakeDataplaneApi, startFakeDataplaneApi } from '../support/fake-dataplaneapi.js';
import { claim, FOREIGN_TEXT, mapRender, providerOn } from '../support/fake-dataplaneapi-provider.js';
import { registry } from '../support/owner.js';

/**
 * What a full read asks of HAProxy's runtime through the API (issue 32): the servers' stats once, and the
 * backends' stats (every stat of every backend: 4 MB and ten seconds of the real API's time at 5000) only
 * when many backends lost all their servers at runtime.
 */
const signal = () => AbortSignal.timeout(10_000);
const BACKEND_STATS = 'GET /services/haproxy/stats/native?type=backend';
const SERVER_STATS = 'GET /services/haproxy/stats/native?type=server';
const probes = (requests: string[]) =>
  requests.filter((r) => /^GET \/services\/haproxy\/runtime\/backends\/[^/]+\/servers$/.test(r));

describe('Data Plane API provider: what runs, read after a restart', () => {
  let fake: FakeDataplaneApi;
  const providers: DataplaneProvider[] = [];
  afterEach(async () => {
    expect(fake.violations).toEqual([]);
    for (const p of providers.splice(0)) await p.close();
    await fake.close();
  });

  const start = async (minSlots: number, persistDelayMs = 20) => {
    fake = await startFakeDataplaneApi();
    fake.reset(FOREIGN_TEXT);
    const inner = providerOn(fake, { persistDelayMs });
    providers.push(inner);
    const owned = new OwnedProvider(inner, registry);
    const pass = async (claims: RouteClaim[], fresh = false) => {
      const reading = await owned.read(signal(), { fresh });
      const p = plan(renderDesired(resolveRoutes(claims).routes, mapRender(minSlots)), reading.state, {
        grow: 'ahead',
      });
      await owned.apply(p, reading, signal());
    };
    /** A full read by a provider that knows nothing yet, as after a restart; the requests it made. */
    const restartRead = async () => {
      const fresh = providerOn(fake);
      providers.push(fresh);
      const from = fake.requests.length;
      const reading = await new OwnedProvider(fresh, registry).read(signal());
      return { reading, sent: fake.requests.slice(from) };
    };
    return { inner, pass, restartRead };
  };

  it('every backend runs a server: the servers stats only, no backend stats and no request per backend', async () => {
    const b = await start(40);
    const many = Array.from({ length: 30 }, (_, i) => claim(`c${i}`, 30100 + i));
    await b.pass(many, true);
    await b.inner.persisted();
    const { reading, sent } = await b.restartRead();
    expect(sent.filter((r) => r === SERVER_STATS)).toHaveLength(1);
    expect(sent).not.toContain(BACKEND_STATS);
    expect(probes(sent)).toEqual([]);
    expect(reading.backend('kubebyon_slot_00001')?.servers.map((s) => s.port)).toEqual([30100]);
  });

  it('a backend whose servers all went at runtime, its file not written yet: asked on its own, read as running empty', async () => {
    const b = await start(4, 60_000);
    await b.pass([claim('a')], true);
    await b.inner.persisted();
    await b.pass([]);
    // The files still name the server; HAProxy no longer runs it.
    expect(fake.text).toMatch(/server srv1 127\.0\.0\.1:30001/);
    const { reading, sent } = await b.restartRead();
    expect(sent).not.toContain(BACKEND_STATS);
    expect(probes(sent)).toEqual(['GET /services/haproxy/runtime/backends/kubebyon_slot_00001/servers']);
    expect(reading.backend('kubebyon_slot_00001')?.servers).toEqual([]);
  });

  it(`more than ${PROBE_MAX} such backends: one backend stats request instead of a request each`, async () => {
    const n = PROBE_MAX + 3;
    const b = await start(n + 2, 60_000);
    await b.pass(
      Array.from({ length: n }, (_, i) => claim(`c${i}`, 30100 + i)),
      true,
    );
    await b.inner.persisted();
    await b.pass([]);
    const { reading, sent } = await b.restartRead();
    expect(sent.filter((r) => r === BACKEND_STATS)).toHaveLength(1);
    expect(probes(sent)).toEqual([]);
    expect(reading.backend('kubebyon_slot_00001')?.servers).toEqual([]);
  });
});
