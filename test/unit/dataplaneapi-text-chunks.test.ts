import { afterEach, describe, expect, it } from 'vitest';
import { createClient } from '../../src/providers/dataplaneapi/client.js';
import { storageName } from '../../src/providers/dataplaneapi/map-names.js';
import { MapFiles } from '../../src/providers/dataplaneapi/maps.js';
import { type FakeDataplaneApi, startFakeDataplaneApi } from '../support/fake-dataplaneapi.js';

/**
 * A text body given as buffers (the allow map, one buffer per slot) reaches the Data Plane API as the same
 * text, one request, with its length declared: it is streamed, never joined into one string.
 */
const MAP = 'kubebyon-haproxy-adapter.allow.map';
const signal = () => AbortSignal.timeout(10_000);

describe('a text body as buffers', () => {
  let fake: FakeDataplaneApi | undefined;
  let close = () => {};
  afterEach(async () => {
    close();
    await fake?.close();
    fake = undefined;
  });

  async function start() {
    fake = await startFakeDataplaneApi();
    const sent: number[] = [];
    const client = createClient({
      url: fake.url,
      username: fake.username,
      password: fake.password,
      timeoutMs: 5_000,
      onBytes: (direction, n) => {
        if (direction === 'sent') sent.push(n);
      },
    });
    close = () => client.close();
    fake.runtime.storage.set(storageName(MAP), 'old 1\n');
    return { fake, client, sent };
  }

  it('stores exactly the buffers joined, counted once at their length, and the API document allows it', async () => {
    const { fake, client, sent } = await start();
    const chunks = [
      Buffer.from('slot_00001 1\n'),
      Buffer.from(''),
      Buffer.from('198.18.0.1/32|slot_00001 1\n'),
    ];
    await client.PUT('/services/haproxy/storage/maps/{name}', {
      params: { path: { name: storageName(MAP) }, query: { skip_reload: true } },
      body: chunks as [Buffer, ...Buffer[]],
      signal: signal(),
    });
    expect(fake.runtime.storage.get(storageName(MAP))).toBe('slot_00001 1\n198.18.0.1/32|slot_00001 1\n');
    expect(sent).toEqual([Buffer.concat(chunks).length]);
    expect(fake.violations).toEqual([]);
  });

  it('writes a map given as buffers through MapFiles, and an empty one as its comment line', async () => {
    const { fake, client } = await start();
    const maps = new MapFiles(client);
    const counter = { requests: 0 };
    const text = Array.from({ length: 5000 }, (_, i) => `198.18.${i >> 8}.${i & 255}/32|slot_${i} 1\n`);
    await maps.write(
      MAP,
      text.map((line) => Buffer.from(line)),
      signal(),
      counter,
    );
    expect(fake.runtime.storage.get(storageName(MAP))).toBe(text.join(''));
    await maps.write(MAP, [Buffer.alloc(0), Buffer.alloc(0)], signal(), counter);
    expect(fake.runtime.storage.get(storageName(MAP))).toBe('# no entries\n');
    await maps.write(MAP, [], signal(), counter);
    expect(fake.runtime.storage.get(storageName(MAP))).toBe('# no entries\n');
    expect(fake.violations).toEqual([]);
  });
});
