import { close, fdatasync, fstat, fsync, ftruncate, open as openFd, write } from 'node:fs';
import { open, readFile } from 'node:fs/promises';
import { dirname } from 'node:path';
import { promisify } from 'node:util';
import { z } from 'zod';
import { ClusterRecord } from '../model/cluster.js';

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
    return { entries: [], validBytes: 0, totalBytes: 0 };
  }
  return parseJournal(path, text);
}

// A plain descriptor, not a FileHandle: the journal is held for the process's life, and a FileHandle left to
// the garbage collector (a store a test never closes) is closed with a warning.
const fd = {
  open: promisify(openFd),
  datasync: promisify(fdatasync),
  sync: promisify(fsync),
  truncate: promisify(ftruncate),
  stat: promisify(fstat),
  close: promisify(close),
};

export class Journal {
  /** Lines since the last reset. */
  entries = 0;
  bytes = 0;

  private constructor(
    readonly path: string,
    private handle: number,
  ) {}

  /** Opens the journal for appending (creating it), its torn tail cut off so new lines start whole. */
  static async open(path: string, content: JournalContent, entries: number): Promise<Journal> {
    const handle = await fd.open(path, 'a', 0o600);
    try {
      if (content.totalBytes > content.validBytes) {
        await fd.truncate(handle, content.validBytes);
        await fd.sync(handle);
      }
      await syncDir(path);
    } catch (err) {
      await fd.close(handle);
      throw err;
    }
    const journal = new Journal(path, handle);
    journal.entries = entries;
    journal.bytes = content.validBytes;
    return journal;
  }

  /**
   * Appends the lines and syncs them: resolves once they are durable. Refuses a journal no longer in its
   * folder (removed or replaced under us), where a write would succeed and be lost.
   */
  async append(entries: readonly JournalEntry[]): Promise<void> {
    if (entries.length === 0) return;
    if ((await fd.stat(this.handle)).nlink === 0) throw new Error(`journal ${this.path} was removed`);
    const text = `${entries.map((e) => JSON.stringify(e)).join('\n')}\n`;
    await writeAll(this.handle, text);
    await fd.datasync(this.handle);
    this.entries += entries.length;
    this.bytes += Buffer.byteLength(text);
  }

  /** Empties the journal (after a snapshot holds all of it), recreating the file if it went away. */
  async reset(): Promise<void> {
    const handle = await fd.open(this.path, 'w', 0o600);
    try {
      await fd.sync(handle);
      await syncDir(this.path);
    } catch (err) {
      await fd.close(handle);
      throw err;
    }
    await fd.close(this.handle).catch(() => {});
    this.handle = handle;
    this.entries = 0;
    this.bytes = 0;
  }

  close(): Promise<void> {
    return fd.close(this.handle);
  }
}

async function syncDir(path: string): Promise<void> {
  const dir = await open(dirname(path), 'r');
  try {
    await dir.sync();
  } finally {
    await dir.close();
  }
}

const writeBuffer = promisify(write) as (fd: number, b: Buffer) => Promise<{ bytesWritten: number }>;

// write(2) may write less than asked (a full disk, a signal): the rest follows, or the error does.
async function writeAll(handle: number, text: string): Promise<void> {
  let buffer = Buffer.from(text);
  while (buffer.length > 0) {
    const { bytesWritten } = await writeBuffer(handle, buffer);
    buffer = buffer.subarray(bytesWritten);
  }
}
