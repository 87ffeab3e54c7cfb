import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ClusterStore } from '../../src/store/cluster-store.js';
import { importStateFile } from '../../src/store/import-state.js';
import { storeWriterKilled } from '../support/store-writer.js';

describe('ClusterStore', () => {
  let dir: string;
  let path: string;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'kubebyon-store-'));
    path = join(dir, 'nested', 'state.json');
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it('keeps every change across a reopen', async () => {
    const store = await ClusterStore.open(path);
    await store.upsert({ name: 'a', host: 'a.example.com', target: { nodePort: 30001 } }, undefined, 10);
    await store.upsert(
      {
        name: 'b',
        host: 'b.example.com',
        target: { service: { namespace: 'ns', name: 'b', port: 'https' } },
      },
      undefined,
      11,
    );
    await store.delete('a');
    const reopened = await ClusterStore.open(path);
    expect(reopened.list()).toEqual([
      {
        name: 'b',
        host: 'b.example.com',
        target: { service: { namespace: 'ns', name: 'b', port: 'https' } },
        claimedAt: 11,
        updatedAt: 11,
      },
    ]);
    // No temporary left: the snapshot (written at the last compaction, none yet) and the journal.
    expect(readdirSync(join(dir, 'nested'))).toEqual(['state.json.journal']);
  });

  it('keeps the claim time while the host stays, and restarts it when the host changes', async () => {
    const store = await ClusterStore.open(path);
    await store.upsert({ name: 'a', host: 'a.example.com', target: { nodePort: 1 } }, undefined, 10);
    expect(
      await store.upsert({ name: 'a', host: 'a.example.com', target: { nodePort: 2 } }, undefined, 20),
    ).toMatchObject({ claimedAt: 10, updatedAt: 20 });
    expect(
      await store.upsert({ name: 'a', host: 'z.example.com', target: { nodePort: 2 } }, undefined, 30),
    ).toMatchObject({ claimedAt: 30 });
  });

  it('stamps every version of a cluster apart, even two within one millisecond', async () => {
    const store = await ClusterStore.open(path);
    const first = await store.upsert(
      { name: 'a', host: 'a.example.com', target: { nodePort: 1 } },
      undefined,
      10,
    );
    const second = await store.upsert(
      { name: 'a', host: 'a.example.com', target: { nodePort: 2 } },
      undefined,
      10,
    );
    const third = await store.replaceAll(
      [{ name: 'a', host: 'a.example.com', target: { nodePort: 3 } }],
      undefined,
      10,
    );
    expect([first.updatedAt, second.updatedAt]).toEqual([10, 11]);
    expect(third).toEqual({ removed: [] });
    expect(store.get('a')?.updatedAt).toBe(12);
  });

  it('replaces the whole set, reporting what it removed', async () => {
    const store = await ClusterStore.open(path);
    await store.upsert({ name: 'a', host: 'a.example.com', target: { nodePort: 1 } }, undefined, 10);
    await store.upsert({ name: 'b', host: 'b.example.com', target: { nodePort: 2 } }, undefined, 10);
    const result = await store.replaceAll(
      [
        { name: 'b', host: 'b.example.com', target: { nodePort: 2 } },
        { name: 'c', host: 'c.example.com', target: { nodePort: 3 } },
      ],
      undefined,
      50,
    );
    expect(result).toEqual({ removed: ['a'] });
    expect(store.list().map((c) => [c.name, c.updatedAt])).toEqual([
      ['b', 10],
      ['c', 50],
    ]);
  });

  it('rewrites nothing in a full set for a cluster whose list is the same, and a new version for a new list', async () => {
    const store = await ClusterStore.open(path);
    const a = { name: 'a', host: 'a.example.com', target: { nodePort: 1 } };
    await store.replaceAll([{ ...a, authorizedNetworks: ['10.0.0.0/8'] }], undefined, 10);
    await store.replaceAll([{ ...a, authorizedNetworks: ['10.0.0.0/8'] }], undefined, 20);
    expect(store.get('a')).toMatchObject({ updatedAt: 10, authorizedNetworks: ['10.0.0.0/8'] });
    await store.replaceAll([{ ...a, authorizedNetworks: ['10.0.0.0/16'] }], undefined, 30);
    expect(store.get('a')).toMatchObject({
      updatedAt: 30,
      claimedAt: 10,
      authorizedNetworks: ['10.0.0.0/16'],
    });
    // An empty list is an open cluster: no field, and the same as none.
    await store.replaceAll([{ ...a, authorizedNetworks: [] }], undefined, 40);
    expect(store.get('a')).toEqual({ ...a, claimedAt: 10, updatedAt: 40 });
    await store.replaceAll([a], undefined, 50);
    expect(store.get('a')?.updatedAt).toBe(40);
  });

  it('carries authorized networks into a store that takes plain upserts (import-state)', async () => {
    const from = await ClusterStore.open(path);
    await from.upsert({
      name: 'a',
      host: 'a.example.com',
      target: { nodePort: 1 },
      authorizedNetworks: ['::1/128'],
    });
    await from.upsert({ name: 'b', host: 'b.example.com', target: { nodePort: 2 } });
    const to = await ClusterStore.open(join(dir, 'other', 'state.json'));
    expect(await importStateFile(path, to)).toEqual({ imported: 2, skipped: 0 });
    expect(to.get('a')?.authorizedNetworks).toEqual(['::1/128']);
    expect(to.get('b')).not.toHaveProperty('authorizedNetworks');
  });

  it('changes nothing, in memory or on disk, when a write fails', async () => {
    const store = await ClusterStore.open(path);
    await store.upsert({ name: 'a', host: 'a.example.com', target: { nodePort: 1 } });
    rmSync(join(dir, 'nested'), { recursive: true });
    await expect(
      store.upsert({ name: 'b', host: 'b.example.com', target: { nodePort: 2 } }),
    ).rejects.toThrow();
    expect(store.list().map((c) => c.name)).toEqual(['a']);
    // Once the directory is back, the next write holds the earlier state and not the failed change.
    mkdirSync(join(dir, 'nested'));
    await store.upsert({ name: 'c', host: 'c.example.com', target: { nodePort: 3 } });
    const onDisk = readFileSync(path, 'utf8') + readFileSync(`${path}.journal`, 'utf8');
    expect(onDisk).toContain('a.example.com');
    expect(onDisk).toContain('c.example.com');
    expect(onDisk).not.toContain('b.example.com');
  });

  it('refuses to start from a state file it cannot read, instead of starting empty', async () => {
    const store = await ClusterStore.open(path);
    await store.upsert({ name: 'a', host: 'a.example.com', target: { nodePort: 1 } });
    writeFileSync(path, '{"version":1,"clusters":[{"name":1}]}');
    await expect(ClusterStore.open(path)).rejects.toThrow(/not a valid cluster store/);
  });

  it('loses nothing it acknowledged when the process is killed with SIGKILL', async () => {
    const written = await storeWriterKilled(path, [], 200);
    const acked = written.map((line) => line.replace('acked ', ''));
    const names = new Set((await ClusterStore.open(path)).list().map((c) => c.name));
    expect(acked.length).toBeGreaterThanOrEqual(200);
    for (const name of acked) expect(names.has(name)).toBe(true);
  });
});
