import {
  appendFileSync,
  copyFileSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { AtomicFile } from '../../src/store/atomic-file.js';
import { ClusterStore } from '../../src/store/cluster-store.js';
import { parseJournal } from '../../src/store/journal.js';
import { storeWriterKilled } from '../support/store-writer.js';

const snapshotWrites = vi.spyOn(AtomicFile.prototype, 'write');
const put = (i: number, port = 30000 + i) => ({
  name: `c${i}`,
  host: `c${i}.example.com`,
  target: { nodePort: port },
});

describe('ClusterStore journal', () => {
  let dir: string;
  let path: string;
  let journal: string;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'kubebyon-journal-'));
    path = join(dir, 'clusters.json');
    journal = `${path}.journal`;
    snapshotWrites.mockClear();
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it('stores a change as one appended line, without rewriting the other clusters', async () => {
    const store = await ClusterStore.open(path, { compactEntries: 3 });
    await store.replaceAll(Array.from({ length: 5 }, (_, i) => put(i)));
    expect(snapshotWrites).toHaveBeenCalledTimes(1); // a batch past the threshold is a snapshot
    const snapshotSize = statSync(path).size;
    await store.upsert(put(9));
    await store.delete('c0');
    expect(snapshotWrites).toHaveBeenCalledTimes(1);
    expect(statSync(path).size).toBe(snapshotSize);
    const lines = parseJournal(journal, readFileSync(journal, 'utf8')).entries;
    expect(lines).toEqual([
      { seq: 6, put: expect.objectContaining({ name: 'c9' }) },
      { seq: 7, delete: 'c0' },
    ]);
    expect((await ClusterStore.open(path)).list().map((c) => c.name)).toEqual(['c1', 'c2', 'c3', 'c4', 'c9']);
  });

  it('folds the journal into a snapshot after K lines, and reopens to the same clusters', async () => {
    const store = await ClusterStore.open(path, { compactEntries: 4 });
    for (let i = 0; i < 10; i++) await store.upsert(put(i));
    // Lines 1-3 appended, the 4th a snapshot (journal emptied); the same again for 5-8; 9-10 appended.
    expect(snapshotWrites).toHaveBeenCalledTimes(2);
    expect(parseJournal(journal, readFileSync(journal, 'utf8')).entries.map((e) => e.seq)).toEqual([9, 10]);
    expect(JSON.parse(readFileSync(path, 'utf8'))).toMatchObject({ version: 1, seq: 8 });
    const reopened = await ClusterStore.open(path);
    expect(reopened.list()).toEqual(store.list());
    expect(reopened.list()).toHaveLength(10);
  });

  it('keeps authorized networks across a reopen, from journal lines and from a snapshot', async () => {
    const listed = (i: number, authorizedNetworks: string[]) => ({ ...put(i), authorizedNetworks });
    const store = await ClusterStore.open(path, { compactEntries: 4 });
    await store.upsert(listed(1, ['10.0.0.0/8', '2001:db8::/32']));
    await store.upsert(put(2));
    // In the journal only (no snapshot yet): the lines carry the lists.
    expect(snapshotWrites).toHaveBeenCalledTimes(0);
    const lines = parseJournal(journal, readFileSync(journal, 'utf8')).entries;
    expect(lines[0]).toMatchObject({ put: { authorizedNetworks: ['10.0.0.0/8', '2001:db8::/32'] } });
    expect(lines[1]).toMatchObject({
      put: expect.not.objectContaining({ authorizedNetworks: expect.anything() }),
    });
    const fromJournal = await ClusterStore.open(path, { compactEntries: 4 });
    expect(fromJournal.list()).toEqual(store.list());
    // Past the threshold: folded into a snapshot, which holds them too.
    await fromJournal.upsert(listed(3, ['198.51.0.0/16']));
    await fromJournal.upsert(listed(1, ['10.0.0.0/16']));
    await fromJournal.upsert(put(4));
    expect(snapshotWrites).toHaveBeenCalled();
    expect(readFileSync(path, 'utf8')).toContain('"authorizedNetworks":["10.0.0.0/16"]');
    const fromSnapshot = await ClusterStore.open(path);
    expect(fromSnapshot.list()).toEqual(fromJournal.list());
    expect(fromSnapshot.list().map((c) => [c.name, c.authorizedNetworks])).toEqual([
      ['c1', ['10.0.0.0/16']],
      ['c2', undefined],
      ['c3', ['198.51.0.0/16']],
      ['c4', undefined],
    ]);
    expect(await ClusterStore.read(path)).toEqual(fromJournal.list());
  });

  it('ignores a partial last line (a write cut short) and appends after the whole ones', async () => {
    const store = await ClusterStore.open(path);
    await store.upsert(put(1), undefined, 10);
    await store.upsert(put(2), undefined, 20);
    appendFileSync(journal, '{"seq":3,"put":{"name":"c3","host":"c3.exa');
    const reopened = await ClusterStore.open(path);
    expect(reopened.list().map((c) => c.name)).toEqual(['c1', 'c2']);
    await reopened.upsert(put(4), undefined, 40);
    expect((await ClusterStore.open(path)).list().map((c) => c.name)).toEqual(['c1', 'c2', 'c4']);
    expect((await ClusterStore.read(path)).map((c) => c.name)).toEqual(['c1', 'c2', 'c4']);
  });

  it('refuses a journal with a damaged line before its end, instead of starting without it', async () => {
    const store = await ClusterStore.open(path);
    await store.upsert(put(1));
    writeFileSync(journal, `{"seq":1,"put":{"name":1}}\n${readFileSync(journal, 'utf8')}`);
    await expect(ClusterStore.open(path)).rejects.toThrow(/line 1 is not a valid change/);
  });

  it('skips journal lines the snapshot already holds (a kill between a snapshot and emptying the journal)', async () => {
    const later = { ...put(1, 30002), claimedAt: 5, updatedAt: 9 };
    writeFileSync(path, JSON.stringify({ version: 1, seq: 2, clusters: [later] }));
    const older = { seq: 1, put: { ...put(1, 30001), claimedAt: 5, updatedAt: 7 } };
    const gone = { seq: 2, delete: 'c9' };
    writeFileSync(journal, `${JSON.stringify(older)}\n${JSON.stringify(gone)}\n`);
    const store = await ClusterStore.open(path);
    expect(store.list()).toEqual([later]);
    await store.upsert(put(3));
    expect((await ClusterStore.open(path)).list().map((c) => c.name)).toEqual(['c1', 'c3']);
  });

  it('keeps the state of a file written before the journal existed, and builds on it', async () => {
    copyFileSync(join(import.meta.dirname, '../fixtures/store-before-journal.json'), path);
    const store = await ClusterStore.open(path);
    expect(store.get('alpha')).toMatchObject({ target: { nodePort: 30444 }, updatedAt: 1764700001000 });
    expect(store.get('beta')?.target).toEqual({
      service: { namespace: 'vc-beta', name: 'beta', port: 'https' },
    });
    await store.upsert({ name: 'gamma', host: 'api.gamma.example.com', target: { nodePort: 30500 } });
    await store.delete('alpha');
    expect((await ClusterStore.open(path)).list().map((c) => c.name)).toEqual(['beta', 'gamma']);
  });

  it('fails a change whose journal was removed, then stores changes in snapshots until it is back', async () => {
    const store = await ClusterStore.open(path);
    await store.upsert(put(1));
    rmSync(journal);
    mkdirSync(journal);
    await expect(store.upsert(put(2))).rejects.toThrow(/journal .* was removed/);
    expect(store.list().map((c) => c.name)).toEqual(['c1']);
    // A snapshot still stores changes while the journal cannot be recreated: ready, but no append.
    expect(await store.health()).toEqual({ ok: true });
    await store.upsert(put(3));
    expect(JSON.parse(readFileSync(path, 'utf8')).clusters).toHaveLength(2);
    rmSync(journal, { recursive: true });
    await store.upsert(put(4));
    expect(parseJournal(journal, readFileSync(journal, 'utf8')).entries).toEqual([]);
    await store.upsert(put(5));
    expect(parseJournal(journal, readFileSync(journal, 'utf8')).entries).toHaveLength(1);
    expect((await ClusterStore.open(path)).list().map((c) => c.name)).toEqual(['c1', 'c3', 'c4', 'c5']);
  });

  it('is not healthy while neither the journal nor a snapshot can be written', async () => {
    const store = await ClusterStore.open(path);
    await store.upsert(put(1));
    for (const p of [journal, path]) {
      rmSync(p, { force: true });
      mkdirSync(p);
    }
    await expect(store.upsert(put(2))).rejects.toThrow();
    expect(await store.health()).toMatchObject({
      ok: false,
      detail: expect.stringMatching(/^last write failed/),
    });
    rmSync(path, { recursive: true });
    expect(await store.health()).toEqual({ ok: true });
  });

  it('loses no acknowledged change when killed with SIGKILL across compactions', async () => {
    const live = new Set<string>();
    for (const line of await storeWriterKilled(path, ['7'], 300)) {
      const [what, name = ''] = line.split(' ');
      if (what === 'acked') live.add(name);
      else live.delete(name);
    }
    const names = new Set((await ClusterStore.open(path)).list().map((c) => c.name));
    // Everything acknowledged is there; at most the one change in flight at the kill is there too.
    for (const name of live) expect(names.has(name)).toBe(true);
    expect(names.size - live.size).toBeLessThanOrEqual(1);
  });
});
