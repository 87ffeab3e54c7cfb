import { open, rename, unlink } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';

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
export async function prepareFileAtomic(path: string, content: string, mode = 0o600): Promise<PreparedFile> {
  const dir = dirname(path);
  const tmpPath = join(dir, `.${basename(path)}.${process.pid}.${Date.now()}.tmp`);
  const handle = await open(tmpPath, 'w', mode);
  try {
    await handle.writeFile(content, 'utf8');
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

/**
 * Replaces `path` with `content` so that a crash at any moment leaves either the old or the new file:
 * write a temporary file beside it, fsync it, rename it over the target, fsync the directory.
 */
export async function writeFileAtomic(path: string, content: string, mode = 0o600): Promise<void> {
  await (await prepareFileAtomic(path, content, mode)).commit();
}
