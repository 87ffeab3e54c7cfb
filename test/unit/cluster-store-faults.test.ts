import { mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ClusterStore } from '../../src/store/cluster-store.js';
import { type JournalIo, nodeJournalIo } from '../../src/store/journal.js';
import type { FolderRoom } from '../../src/store/room.js';

const put = (i: number) => ({ name: `c${i}`, host: `c${i}.example.com`, target: { nodePort: 30000 + i } });
const errno = (code: string) => Object.assign(new Error(`${code}: injected`), { code });
const BLOCK = 4096;
/** A 1 MiB file system, nearly empty. */
const ROOMY: FolderRoom = { bsize: BLOCK, blocks: 256, bavail: 250, files: 1000, ffree: 990 };
/** What the journal's system calls do wrong while set. */
type Fault = { write?: 'short' | undefined; datasync?: string | undefined; truncate?: string | undefined };

/** The files this process holds open (Linux). */
function openFiles(): string[] {
  return readdirSync('/proc/self/fd').map((fd) => {
    try {
      return readlinkSync(`/proc/self/fd/${fd}`);
    } catch {
      return '';
    }
  });
}

// The state folder full or read-only, provoked through the journal's system calls (no mount needed).
describe('ClusterStore on a full or read-only state folder', () => {
  let dir: string;
  let path: string;
  let journal: string;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'kubebyon-store-faults-'));
    path = join(dir, 'clusters.json');
    journal = `${path}.journal`;
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  const names = async () => (await ClusterStore.open(path)).list().map((c) => c.name);
  const size = (p: string) => statSync(p, { throwIfNoEntry: false })?.size ?? 0;

  it('refuses a small append the folder has no room to fold in later, and takes changes once it has', async () => {
    let room = ROOMY;
    const store = await ClusterStore.open(path, { compactEntries: 3, io: { statfs: async () => room } });
    // A snapshot of 40 clusters, then one line in the journal.
    await store.replaceAll(Array.from({ length: 40 }, (_, i) => put(i)));
    await store.upsert(put(40));
    const journalBefore = readFileSync(journal);
    // Room for the line (and more), but not for a snapshot as large as the one there plus the journal.
    const blocksHeld = Math.ceil((size(path) + size(journal)) / BLOCK);
    room = { ...ROOMY, bavail: blocksHeld };
    await expect(store.upsert(put(41))).rejects.toMatchObject({ code: 'ENOSPC' });
    await expect(store.delete('c0')).rejects.toMatchObject({ code: 'ENOSPC' });
    const allButOne = store.list().slice(1);
    await expect(store.replaceAll(allButOne)).rejects.toMatchObject({ code: 'ENOSPC' });
    expect(readFileSync(journal)).toEqual(journalBefore);
    expect(store.list()).toHaveLength(41);
    expect(await store.health()).toMatchObject({ ok: false, detail: expect.stringMatching(/bytes free/) });
    expect(await names()).toHaveLength(41);
    // Space freed: ready again without a change, and the next change is stored.
    room = { ...ROOMY, bavail: 3 * blocksHeld + 3 };
    expect(await store.health()).toEqual({ ok: true });
    await store.delete('c0');
    await store.upsert(put(41));
    const after = await names();
    expect(after).toHaveLength(41);
    expect(after).toContain('c41');
    expect(after).not.toContain('c0');
  });

  it('says it is not ready on a full folder before any change is refused', async () => {
    let room = ROOMY;
    const store = await ClusterStore.open(path, { io: { statfs: async () => room } });
    await store.upsert(put(1));
    expect(await store.health()).toEqual({ ok: true });
    room = { ...ROOMY, bavail: 0 };
    expect(await store.health()).toMatchObject({
      ok: false,
      detail: expect.stringMatching(/^state folder full/),
    });
    // No inode left for the next snapshot's temporary file counts as full too.
    room = { ...ROOMY, ffree: 0 };
    expect(await store.health()).toMatchObject({ ok: false, detail: expect.stringMatching(/inode/) });
  });

  it('sets no limit on a file system that states no size (a tmpfs without size=)', async () => {
    const unsized: FolderRoom = { bsize: BLOCK, blocks: 0, bavail: 0, files: 0, ffree: 0 };
    const store = await ClusterStore.open(path, { io: { statfs: async () => unsized } });
    await store.upsert(put(1));
    expect(await store.health()).toEqual({ ok: true });
    expect(await names()).toEqual(['c1']);
  });

  /** Replaces the journal's writes and syncs while `fault` is set. */
  function faulty(fault: Fault): Partial<JournalIo> {
    return {
      write: async (handle, buffer) => {
        if (fault.write !== 'short') return nodeJournalIo.write(handle, buffer);
        // Half the line on disk, then the disk is full.
        if (buffer.length > 1) return nodeJournalIo.write(handle, buffer.subarray(0, buffer.length >> 1));
        throw errno('ENOSPC');
      },
      datasync: async (handle) => {
        if (fault.datasync) throw errno(fault.datasync);
        return nodeJournalIo.datasync(handle);
      },
      truncate: async (handle, length) => {
        if (fault.truncate) throw errno(fault.truncate);
        return nodeJournalIo.truncate(handle, length);
      },
    };
  }

  it('cuts a write cut short back off and refuses it: the journal stays whole, a restart finds none of it', async () => {
    const fault: Fault = {};
    const store = await ClusterStore.open(path, { io: faulty(fault) });
    await store.upsert(put(1));
    const before = readFileSync(journal);
    fault.write = 'short';
    await expect(store.upsert(put(2))).rejects.toMatchObject({ code: 'ENOSPC' });
    expect(readFileSync(journal)).toEqual(before);
    expect(await names()).toEqual(['c1']);
    fault.write = undefined;
    await store.upsert(put(3));
    expect(await names()).toEqual(['c1', 'c3']);
  });

  it('cuts off a whole line whose sync failed: a refused change never comes back after a restart', async () => {
    const fault: Fault = {};
    const store = await ClusterStore.open(path, { io: faulty(fault) });
    await store.upsert(put(1));
    fault.datasync = 'EIO';
    await expect(store.upsert(put(2))).rejects.toMatchObject({ code: 'EIO' });
    expect(readFileSync(journal, 'utf8')).not.toContain('c2.example.com');
    expect(await names()).toEqual(['c1']);
  });

  it('when the line cannot be cut off either, stores the next change as a snapshot past it', async () => {
    const fault: Fault = {};
    const store = await ClusterStore.open(path, { io: faulty(fault) });
    await store.upsert(put(1));
    Object.assign(fault, { datasync: 'EIO', truncate: 'EIO' });
    await expect(store.upsert(put(2))).rejects.toMatchObject({ code: 'EIO' });
    Object.assign(fault, { datasync: undefined, truncate: undefined });
    await store.upsert(put(3));
    expect(JSON.parse(readFileSync(path, 'utf8')).clusters.map((c: { name: string }) => c.name)).toEqual([
      'c1',
      'c3',
    ]);
    expect(readFileSync(journal, 'utf8')).toBe('');
    expect(await names()).toEqual(['c1', 'c3']);
  });

  it('refuses changes while the folder is read-only and stores them once it is writable again', async () => {
    let readOnly = false;
    const store = await ClusterStore.open(path, {
      io: {
        open: async (p, flags, mode) => {
          if (readOnly && p === journal) throw errno('EROFS');
          return nodeJournalIo.open(p, flags, mode);
        },
      },
    });
    await store.upsert(put(1));
    readOnly = true;
    await expect(store.upsert(put(2))).rejects.toMatchObject({ code: 'EROFS' });
    await expect(store.delete('c1')).rejects.toMatchObject({ code: 'EROFS' });
    expect(await store.health()).toMatchObject({ ok: false, detail: expect.stringMatching(/EROFS/) });
    expect(await names()).toEqual(['c1']);
    readOnly = false;
    expect(await store.health()).toEqual({ ok: true });
    await store.upsert(put(2));
    expect(await names()).toEqual(['c1', 'c2']);
  });

  it('holds no descriptor of the journal between changes (one open for writing keeps a remount read-only from happening)', async () => {
    const store = await ClusterStore.open(path);
    await store.upsert(put(1));
    await store.delete('c1');
    expect(openFiles()).not.toContain(journal);
  });

  it('opens without writing when its journal is whole, so that a read-only or full folder still starts', async () => {
    const store = await ClusterStore.open(path);
    await store.upsert(put(1));
    const calls: string[] = [];
    const watched = await ClusterStore.open(path, {
      io: {
        open: async (p, flags, mode) => {
          calls.push(String(flags));
          return nodeJournalIo.open(p, flags, mode);
        },
      },
    });
    expect(calls).toEqual([]);
    expect(openFiles()).not.toContain(journal);
    expect(watched.list().map((c) => c.name)).toEqual(['c1']);
  });
});
