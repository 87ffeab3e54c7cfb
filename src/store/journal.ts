import { close, constants, fdatasync, fstat, fsync, ftruncate, open as openFd, write } from 'node:fs';
import { readFile, statfs } from 'node:fs/promises';
import { dirname } from 'node:path';
import { promisify } from 'node:util';
import { z } from 'zod';
import { ClusterRecord } from '../model/cluster.js';
import { type FolderRoom, roomShortfall } from './room.js';

/**
 * The store's append-only journal: one JSON line per change, each numbered (`seq`), written beside the
 * snapshot. A line is acknowledged once it is synced; a kill -9 mid-write leaves at most one partial last line,
 * which reading ignores (it was never acknowledged). Lines at or below the snapshot's `seq` are already in it:
 * a crash between a snapshot and the journal's truncation replays nothing twice.
 */
export const JournalEntry = z.union([
  z.object({ seq: z.number().int(), put: ClusterRecord }),
  z.object({ seq: z.number().int(), delete: z.string() }),
]);
export type JournalEntry = z.infer<typeof JournalEntry>;

export interface JournalContent {
  entries: JournalEntry[];
  /** Bytes of whole lines: what follows them is a torn tail. */
  validBytes: number;
  /** Bytes in the file, torn tail included. */
  totalBytes: number;
  /** There was no journal file. */
  missing?: true;
}

/** Parses a journal's text; a last line without its newline is a write cut short, and left out. */
export function parseJournal(path: string, text: string): JournalContent {
  const entries: JournalEntry[] = [];
  let start = 0;
  let lineNo = 0;
  for (let end = text.indexOf('\n'); end >= 0; end = text.indexOf('\n', start)) {
    lineNo++;
    const line = text.slice(start, end);
    start = end + 1;
    let json: unknown;
    try {
      json = JSON.parse(line);
    } catch (err) {
      throw new Error(`journal ${path} line ${lineNo} is not JSON: ${(err as Error).message}`);
    }
    const parsed = JournalEntry.safeParse(json);
    if (!parsed.success)
      throw new Error(`journal ${path} line ${lineNo} is not a valid change: ${parsed.error.message}`);
    entries.push(parsed.data);
  }
  return {
    entries,
    validBytes: Buffer.byteLength(text.slice(0, start)),
    totalBytes: Buffer.byteLength(text),
  };
}

/** A journal's changes, read without changing anything; none when there is no journal. */
export async function readJournal(path: string): Promise<JournalContent> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    return { entries: [], validBytes: 0, totalBytes: 0, missing: true };
  }
  return parseJournal(path, text);
}

/** The system calls the journal makes, on plain descriptors (replaceable to provoke faults in tests). */
export interface JournalIo {
  open(path: string, flags: string | number, mode?: number): Promise<number>;
  /** Writes from the buffer's start; resolves with the bytes written, which may be fewer. */
  write(handle: number, buffer: Buffer): Promise<number>;
  datasync(handle: number): Promise<void>;
  sync(handle: number): Promise<void>;
  truncate(handle: number, length: number): Promise<void>;
  size(handle: number): Promise<number>;
  close(handle: number): Promise<void>;
  statfs(path: string): Promise<FolderRoom>;
}

const writeBuffer = promisify(write) as (fd: number, b: Buffer) => Promise<{ bytesWritten: number }>;

// Plain descriptors, not FileHandles: a FileHandle left to the garbage collector is closed with a warning.
export const nodeJournalIo: JournalIo = {
  open: promisify(openFd) as JournalIo['open'],
  write: async (handle, buffer) => (await writeBuffer(handle, buffer)).bytesWritten,
  datasync: promisify(fdatasync),
  sync: promisify(fsync),
  truncate: promisify(ftruncate) as JournalIo['truncate'],
  size: async (handle) => (await promisify(fstat)(handle)).size,
  close: promisify(close),
  statfs: (path) => statfs(path),
};

/**
 * The journal file, written one append at a time: each opens it (never creating it), checks that it holds
 * exactly the lines written so far and that the folder has room, writes the lines whole, syncs, and closes.
 * No descriptor is held between appends: a folder remounted read-only refuses the next open (a descriptor
 * held open for writing would also keep the remount from happening).
 */
export class Journal {
  /** Lines since the last reset. */
  entries = 0;
  /** The file's length: whole lines, all synced. */
  bytes = 0;
  /**
   * The file may not be exactly `bytes` of synced lines (a refused append not cut back, a journal removed or
   * not created): the next write must be a snapshot, whose `reset` empties it.
   */
  dirty = false;

  private constructor(
    readonly path: string,
    private readonly io: JournalIo,
  ) {}

  /**
   * The journal as read, its torn tail cut off (or the file created) so that new lines start whole. Writes
   * nothing when there is nothing to fix, so that a store opens on a read-only or full folder (and refuses
   * changes there); when the fix fails, the journal is dirty.
   */
  static async open(path: string, content: JournalContent, entries: number, io = nodeJournalIo) {
    const journal = new Journal(path, io);
    journal.entries = entries;
    journal.bytes = content.validBytes;
    if (!content.missing && content.totalBytes === content.validBytes) return journal;
    try {
      const handle = await io.open(path, 'a', 0o600);
      try {
        await io.truncate(handle, content.validBytes);
        await io.sync(handle);
      } finally {
        await io.close(handle);
      }
      await syncDir(io, path);
    } catch {
      journal.dirty = true;
    }
    return journal;
  }

  /**
   * Appends the lines and syncs them: resolves once they are durable, or rejects with the file as it was.
   * Refused before anything is written when the folder lacks the room `roomNeeded` asks (the lines and the
   * compaction after them, with the snapshot `snapshotBytes` long). No lines: whether an append would work.
   */
  async append(entries: readonly JournalEntry[], snapshotBytes: number): Promise<void> {
    const text = entries.map((e) => `${JSON.stringify(e)}\n`).join('');
    const buffer = Buffer.from(text);
    const handle = await this.openForAppend();
    try {
      const short = await this.shortfall(snapshotBytes, buffer.length);
      if (short)
        throw Object.assign(new Error(`state folder ${dirname(this.path)}: ${short}`), { code: 'ENOSPC' });
      if (buffer.length === 0) return;
      try {
        await writeAll(this.io, handle, buffer);
        await this.io.datasync(handle);
      } catch (err) {
        await this.cutBack(handle);
        throw err;
      }
    } finally {
      await this.io.close(handle).catch(() => {});
    }
    this.entries += entries.length;
    this.bytes += buffer.length;
  }

  /** Why the folder has no room for an append of `lineBytes` (see `roomNeeded`), or undefined. */
  async shortfall(snapshotBytes: number, lineBytes = 0): Promise<string | undefined> {
    return roomShortfall(await this.io.statfs(dirname(this.path)), snapshotBytes, this.bytes, lineBytes);
  }

  /** Empties the journal (after a snapshot holds all of it), recreating the file if it went away. */
  async reset(): Promise<void> {
    this.dirty = true;
    const handle = await this.io.open(this.path, 'w', 0o600);
    try {
      await this.io.sync(handle);
    } finally {
      await this.io.close(handle);
    }
    await syncDir(this.io, this.path);
    this.entries = 0;
    this.bytes = 0;
    this.dirty = false;
  }

  private async openForAppend(): Promise<number> {
    let handle: number;
    try {
      handle = await this.io.open(this.path, constants.O_WRONLY | constants.O_APPEND);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      // Not recreated here: lines after the snapshot would be lost with the old file.
      if (code !== 'ENOENT' && code !== 'EISDIR') throw err;
      this.dirty = true;
      throw Object.assign(new Error(`journal ${this.path} was removed (${code})`), { code });
    }
    try {
      const size = await this.io.size(handle);
      if (size !== this.bytes) {
        this.dirty = true;
        throw new Error(
          `journal ${this.path} was changed by someone else: ${size} bytes, ${this.bytes} written`,
        );
      }
    } catch (err) {
      await this.io.close(handle).catch(() => {});
      throw err;
    }
    return handle;
  }

  // A refused append leaves the file as it was: a line cut short, or whole but not synced, is cut off, so that
  // no restart finds a change that was refused. If that fails too, the next write is a snapshot.
  private async cutBack(handle: number): Promise<void> {
    try {
      await this.io.truncate(handle, this.bytes);
      await this.io.sync(handle);
    } catch {
      this.dirty = true;
    }
  }
}

async function syncDir(io: JournalIo, path: string): Promise<void> {
  const dir = await io.open(dirname(path), 'r');
  try {
    await io.sync(dir);
  } finally {
    await io.close(dir);
  }
}

// write(2) may write less than asked (a full disk, a signal): the rest follows, or the error does.
async function writeAll(io: JournalIo, handle: number, buffer: Buffer): Promise<void> {
  let rest = buffer;
  while (rest.length > 0) {
    const written = await io.write(handle, rest);
    if (written === 0) throw Object.assign(new Error('write(2) wrote nothing'), { code: 'EIO' });
    rest = rest.subarray(written);
  }
}
