import { type FileHandle, open, readdir, rename, unlink } from 'node:fs/promises';
import { basename, dirname, join, resolve } from 'node:path';

/** A new content for a file, written and synced beside it, not yet in place. */
export interface PreparedFile {
  /** The temporary file holding the new content (in the target's folder, so the rename is atomic). */
  tmpPath: string;
  /** Renames it over the target and syncs the folder: the target then has the new content, whole. */
  commit(): Promise<void>;
  /** Removes the temporary file; the target is untouched. */
  discard(): Promise<void>;
}

/**
 * The first half of `writeFileAtomic`: lets a caller check the new content where it lies (e.g. `haproxy -c`)
 * before it replaces anything.
 */
export async function prepareFileAtomic(
  path: string,
  content: string | readonly Buffer[],
  mode = 0o600,
): Promise<PreparedFile> {
  // A writer that did not open its file still gets it swept, before this process's first write to it.
  await (swept.get(resolve(path)) ?? removeTemporaries(path));
  const dir = dirname(path);
  const tmpPath = join(dir, `${temporaryPrefix(path)}${process.pid}.${Date.now()}.tmp`);
  const handle = await open(tmpPath, 'w', mode);
  try {
    if (typeof content === 'string') await handle.writeFile(content, 'utf8');
    else await writeAll(handle, content);
    // open() applies the umask; the mode asked for is what the reader of the file needs.
    await handle.chmod(mode);
    await handle.sync();
  } catch (err) {
    await handle.close();
    await unlink(tmpPath).catch(() => {});
    throw err;
  }
  await handle.close();
  return {
    tmpPath,
    async commit() {
      try {
        await rename(tmpPath, path);
      } catch (err) {
        await unlink(tmpPath).catch(() => {});
        throw err;
      }
      const dirHandle = await open(dir, 'r');
      try {
        await dirHandle.sync();
      } finally {
        await dirHandle.close();
      }
    },
    discard: () => unlink(tmpPath).catch(() => {}),
  };
}

/** Writes `chunks` in order in one gathered write, as many more as a short write leaves to write. */
async function writeAll(handle: FileHandle, chunks: readonly Buffer[]): Promise<void> {
  let rest = chunks.filter((c) => c.length > 0);
  while (rest.length > 0) {
    let { bytesWritten } = await handle.writev(rest);
    // A regular file takes at least a byte or fails; a write of nothing would otherwise be retried forever.
    if (bytesWritten === 0) throw new Error(`nothing written to ${handle.fd}: the disk took no byte`);
    let i = 0;
    while (i < rest.length && bytesWritten >= (rest[i] as Buffer).length)
      bytesWritten -= (rest[i++] as Buffer).length;
    rest = rest.slice(i);
    if (rest.length > 0 && bytesWritten > 0) rest[0] = (rest[0] as Buffer).subarray(bytesWritten);
  }
}

/**
 * Replaces `path` with `content` (text, or buffers written one after the other) so that a crash at any
 * moment leaves either the old or the new file: write a temporary file beside it, fsync it, rename it over
 * the target, fsync the directory.
 */
export async function writeFileAtomic(
  path: string,
  content: string | readonly Buffer[],
  mode = 0o600,
): Promise<void> {
  await (await prepareFileAtomic(path, content, mode)).commit();
}

const temporaryPrefix = (path: string) => `.${basename(path)}.`;

// Paths swept by this process: a write's own temporary must never be taken for a killed one's.
const swept = new Map<string, Promise<unknown>>();

/**
 * Each folder's names as this process first listed them: every temporary a killed writer left is in it
 * (this process's own are renamed or removed before their write returns). Listed once, not once per file:
 * thousands of files written in one folder (the slots' allow maps) listed it thousands of times, each
 * listing as long as the folder (9 s for 5700 new files, `bench/networks.ts`).
 */
const listings = new Map<string, Promise<string[]>>();

function listing(dir: string): Promise<string[]> {
  const key = resolve(dir);
  let names = listings.get(key);
  if (!names) {
    names = readdir(dir);
    listings.set(key, names);
    names.catch(() => listings.delete(key));
  }
  return names;
}

/**
 * Removes the temporary files `prepareFileAtomic` left beside `path` when its process was killed between
 * writing one and renaming it, and returns their names. Call it only where no write to `path` can be under
 * way (before the first); `AtomicFile.open` does, and a first write does if nothing did.
 */
export function removeTemporaries(path: string): Promise<string[]> {
  const sweep = sweepTemporaries(path);
  swept.set(
    resolve(path),
    sweep.catch(() => {}),
  );
  return sweep;
}

async function sweepTemporaries(path: string): Promise<string[]> {
  const prefix = temporaryPrefix(path);
  let names: string[];
  try {
    names = await listing(dirname(path));
  } catch {
    return [];
  }
  const stale = names.filter(
    (n) => n.startsWith(prefix) && /^[0-9]+\.[0-9]+\.tmp$/.test(n.slice(prefix.length)),
  );
  await Promise.all(stale.map((n) => unlink(join(dirname(path), n)).catch(() => {})));
  return stale;
}

/**
 * A file only ever replaced whole. Every such file is opened this way once, at start, before its first
 * write: the opening sweeps what a kill -9 mid-write left beside it (the store, the seen signatures), so that no start leaves a temporary behind.
 */
export class AtomicFile {
  private constructor(
    readonly path: string,
    /** The temporaries of killed writes that opening removed, for the caller to log. */
    readonly removed: readonly string[],
    private readonly mode: number,
  ) {}

  static async open(path: string, mode = 0o600): Promise<AtomicFile> {
    return new AtomicFile(path, await removeTemporaries(path), mode);
  }

  write(content: string): Promise<void> {
    return writeFileAtomic(this.path, content, this.mode);
  }

  prepare(content: string): Promise<PreparedFile> {
    return prepareFileAtomic(this.path, content, this.mode);
  }
}
