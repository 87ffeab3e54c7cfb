import { access, constants, mkdir, readFile } from 'node:fs/promises';
import { dirname } from 'node:path';
import { z } from 'zod';
import { ClusterRecord, type ClusterTarget } from '../model/cluster.js';
import { compareStrings } from '../routes/route.js';
import { AtomicFile } from './atomic-file.js';

const StoreFile = z.object({ version: z.literal(1), clusters: z.array(ClusterRecord) });

/**
 * The desired state: every accepted cluster, kept in one JSON file that is replaced atomically on each
 * change, so that whatever the webhook acknowledged survives a restart or a `kill -9`. Concurrent changes
 * share one write; reads come from memory.
 */
export class ClusterStore {
  private clusters = new Map<string, ClusterRecord>();
  private pending: Array<{
    mutate: (clusters: Map<string, ClusterRecord>) => unknown;
    resolve: (value: unknown) => void;
    reject: (err: unknown) => void;
  }> = [];
  private writing: Promise<void> | undefined;
  private writeError: string | undefined;

  private constructor(
    private readonly path: string,
    private readonly disk: AtomicFile,
  ) {}

  static async open(path: string): Promise<ClusterStore> {
    await mkdir(dirname(path), { recursive: true });
    // A kill -9 between writing a new version and renaming it leaves the temporary file: opening removes it.
    const store = new ClusterStore(path, await AtomicFile.open(path));
    let text: string | undefined;
    try {
      text = await readFile(path, 'utf8');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    }
    if (text !== undefined) for (const c of parseStoreFile(path, text)) store.clusters.set(c.name, c);
    return store;
  }

  /** The clusters in a state file, read without creating or changing anything (for the command line). */
  static async read(path: string): Promise<ClusterRecord[]> {
    return parseStoreFile(path, await readFile(path, 'utf8'));
  }

  /** Whether changes can be stored: the last write succeeded and the folder is writable. */
  async health(): Promise<{ ok: boolean; detail?: string }> {
    if (this.writeError) {
      // Not until a write succeeds again: one that changes nothing, in line with the others, so that freeing
      // space makes the service ready without waiting for a change to store.
      const failed = this.writeError;
      try {
        await this.change(() => undefined);
      } catch {
        return { ok: false, detail: `last write failed: ${this.writeError ?? failed}` };
      }
    }
    try {
      await access(dirname(this.path), constants.W_OK);
      return { ok: true };
    } catch (err) {
      return { ok: false, detail: `state folder not writable: ${(err as Error).message}` };
    }
  }

  list(): ClusterRecord[] {
    return [...this.clusters.values()].sort((a, b) => compareStrings(a.name, b.name));
  }

  get(name: string): ClusterRecord | undefined {
    return this.clusters.get(name);
  }

  /** Inserts or replaces one cluster; resolves once the change is on disk. */
  upsert(
    input: { name: string; host: string; target: ClusterTarget },
    now = Date.now(),
  ): Promise<ClusterRecord> {
    return this.change((clusters) => {
      const previous = clusters.get(input.name);
      const record: ClusterRecord = {
        ...input,
        claimedAt: claimedAt(previous, input.host, now),
        updatedAt: nextStamp(previous, now),
      };
      clusters.set(input.name, record);
      return record;
    });
  }

  /** Removes one cluster; resolves with whether it existed, once the change is on disk. */
  delete(name: string): Promise<boolean> {
    return this.change((clusters) => clusters.delete(name));
  }

  /** Makes `inputs` the whole desired set (clusters not in it are removed); resolves once on disk. */
  replaceAll(inputs: Array<{ name: string; host: string; target: ClusterTarget }>, now = Date.now()) {
    return this.change((clusters) => {
      const next = new Map<string, ClusterRecord>();
      for (const input of inputs) {
        const previous = clusters.get(input.name);
        next.set(input.name, {
          ...input,
          claimedAt: claimedAt(previous, input.host, now),
          updatedAt: previous && sameInput(previous, input) ? previous.updatedAt : nextStamp(previous, now),
        });
      }
      const removed = [...clusters.keys()].filter((name) => !next.has(name));
      clusters.clear();
      for (const [name, record] of next) clusters.set(name, record);
      return { removed };
    });
  }

  // Group commit: changes that arrive while a write is under way are applied together to a copy and written
  // in one go; each caller resolves once the file holding its change is on disk. A failed write rejects the
  // whole batch and changes nothing, in memory or on disk.
  private change<T>(mutate: (clusters: Map<string, ClusterRecord>) => T): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      this.pending.push({ mutate, resolve: resolve as (value: unknown) => void, reject });
      if (!this.writing) this.writing = this.flush();
    });
  }

  private async flush(): Promise<void> {
    while (this.pending.length > 0) {
      const batch = this.pending.splice(0);
      const copy = new Map(this.clusters);
      const results: unknown[] = [];
      try {
        for (const change of batch) results.push(change.mutate(copy));
        const file = { version: 1 as const, clusters: [...copy.values()] };
        await this.disk.write(`${JSON.stringify(file, null, 2)}\n`);
      } catch (err) {
        this.writeError = err instanceof Error ? err.message : String(err);
        for (const change of batch) change.reject(err);
        continue;
      }
      this.writeError = undefined;
      this.clusters = copy;
      batch.forEach((change, i) => {
        change.resolve(results[i]);
      });
    }
    this.writing = undefined;
  }
}

// Each version of a cluster has its own stamp, even two within one millisecond: a pass tells by the stamp
// whether it planned from the version now stored.
function nextStamp(previous: ClusterRecord | undefined, now: number): number {
  return previous ? Math.max(now, previous.updatedAt + 1) : now;
}

function parseStoreFile(path: string, text: string): ClusterRecord[] {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (err) {
    throw new Error(`state file ${path} is not JSON: ${(err as Error).message}`);
  }
  const parsed = StoreFile.safeParse(json);
  if (!parsed.success)
    throw new Error(`state file ${path} is not a valid cluster store: ${parsed.error.message}`);
  return parsed.data.clusters;
}

// A claim on a host dates from when the cluster first asked for that host; a new host is a new claim.
function claimedAt(previous: ClusterRecord | undefined, host: string, now: number): number {
  return previous && previous.host === host ? previous.claimedAt : now;
}

function sameInput(a: ClusterRecord, b: { host: string; target: ClusterTarget }): boolean {
  return a.host === b.host && JSON.stringify(a.target) === JSON.stringify(b.target);
}
