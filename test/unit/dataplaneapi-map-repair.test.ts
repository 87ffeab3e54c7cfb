import { afterEach, describe, expect, it } from 'vitest';
import { renderDesired } from '../../src/haproxy/render.js';
import { plan } from '../../src/plan/plan.js';
import { storageName } from '../../src/providers/dataplaneapi/map-names.js';
import type { DataplaneProvider } from '../../src/providers/dataplaneapi/provider.js';
import { OwnedProvider } from '../../src/registry/owned-provider.js';
import { type RouteClaim, resolveRoutes } from '../../src/routes/route.js';
import {
  FAKE_VERSIONS,
  type FakeDataplaneApi,
  type FakeVersion,
  startFakeDataplaneApi,
} from '../support/fake-dataplaneapi.js';
import { claim, mapRender, providerOn, SNI_MAP } from '../support/fake-dataplaneapi-provider.js';
import { registry } from '../support/owner.js';

/**
 * Issue 33, part 1: map routing on the Data Plane APIs the official images bundle. The real suite failed its
 * map-routing contract on v3.0.23 and v3.2.15: those versions answer `GET /storage/maps/{name}` with 200
 * `{}` as JSON to a JSON-first `Accept` (axios' default), the provider read that as an empty file, found
 * every map behind what HAProxy runs and wrote the entries it had just read into the file, over a later
 * step's file in the contract's race; the next reload loaded an earlier step. The fake answers by `Accept`
 * as each version does (seen on the real binaries). Without the fix (the provider asking with axios'
 * `Accept`, reading what it gets as the file) the second case fails on 3.0.23 and 3.2.15: the file it reads
 * is never the file, so what runs is never known to be missing from it.
 */
const STORED = storageName(SNI_MAP);
const render = mapRender(4);
const signal = () => AbortSignal.timeout(10_000);

describe.each(FAKE_VERSIONS)('map files, fake Data Plane API v%s', (version: FakeVersion) => {
  let fake: FakeDataplaneApi;
  const made: DataplaneProvider[] = [];
  const owned = () => {
    const p = providerOn(fake, { persistDelayMs: 20 });
    made.push(p);
    return new OwnedProvider(p, registry);
  };
  afterEach(async () => {
    for (const p of made.splice(0)) await p.close();
    expect(fake.violations).toEqual([]);
    await fake.close();
  });

  async function converge(p: OwnedProvider, claims: RouteClaim[]): Promise<void> {
    const reading = await p.read(signal(), { fresh: true });
    await p.apply(
      plan(renderDesired(resolveRoutes(claims).routes, render), reading.state),
      reading,
      signal(),
    );
    await (made.at(-1) as DataplaneProvider).persisted();
  }
  const mapWrites = () => fake.requests.filter((r) => r.startsWith('PUT /services/haproxy/storage/maps/'));
  const routes = () => [...(fake.runtime.entries.get(STORED)?.keys() ?? [])].sort();

  it('a full read of a file in line with what runs writes no map file', async () => {
    fake = await startFakeDataplaneApi({ version });
    await converge(owned(), [claim('one'), claim('two', 30002)]);
    expect(routes()).toEqual(['one.example.com', 'two.example.com']);
    fake.requests.length = 0;
    for (let i = 0; i < 3; i++) {
      const reading = await owned().read(signal(), { fresh: true });
      expect([...(reading.state.maps?.find((m) => m.name === SNI_MAP)?.entries.keys() ?? [])].sort()).toEqual(
        routes(),
      );
    }
    expect(mapWrites()).toEqual([]);
    // The stored map is asked for as a file, never as JSON.
    expect(
      fake.requests.filter((r) => r.startsWith(`GET /services/haproxy/storage/maps/${STORED}`)),
    ).not.toEqual([]);
  });

  it('a file behind what runs (a crash before persistence) is written by the next full read', async () => {
    fake = await startFakeDataplaneApi({ version });
    await converge(owned(), [claim('one')]);
    const slot = fake.runtime.entries.get(STORED)?.get('one.example.com') as string;
    fake.runtime.entries.get(STORED)?.set('lost.example.com', slot);
    await owned().read(signal(), { fresh: true });
    expect(fake.runtime.storage.get(STORED)).toContain('lost.example.com');
    // A reload by anyone keeps it.
    fake.reload();
    expect(routes()).toContain('lost.example.com');
  });

  it('a plan only looks: a file behind is left for the service to write', async () => {
    fake = await startFakeDataplaneApi({ version });
    await converge(owned(), [claim('one')]);
    const slot = fake.runtime.entries.get(STORED)?.get('one.example.com') as string;
    fake.runtime.entries.get(STORED)?.set('lost.example.com', slot);
    fake.requests.length = 0;
    await owned().read(signal(), { fresh: true, settle: false });
    expect(mapWrites()).toEqual([]);
    expect(fake.runtime.storage.get(STORED)).not.toContain('lost.example.com');
  });
});
