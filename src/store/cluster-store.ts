import { access, constants, mkdir, readFile } from 'node:fs/promises';
import { dirname } from 'node:path';
import { z } from 'zod';
import { ClusterRecord } from '../model/cluster.js';
import { sameNetworks } from '../routes/networks.js';
import { compareStrings } from '../routes/route.js';
import { AtomicFile } from './atomic-file.js';
import type { ClusterInput, DesiredStore, WriteStamp } from './desired-store.js';
import { Draft } from './draft.js';
import { Journal, type JournalIo, nodeJournalIo, readJournal } from './journal.js';

const StoreFile = z.object({
  version: z.literal(1),
  /** The last journal line the snapshot holds (absent in files written before the journal). */
  seq: z.number().int().optional(),
  clusters: z.array(ClusterRecord),
});

/** Journal lines (or bytes) after which the next write folds the journal into a new snapshot. */
export const COMPACT_ENTRIES = 1000;
export const COMPACT_BYTES = 4 * 2 ** 20;

type Input = ClusterInput;

export interface StoreOptions {
  /** Journal lines after which a write is a snapshot instead (default `COMPACT_ENTRIES`). */
  compactEntries?: number;
  /** Journal bytes after which a write is a snapshot instead (default `COMPACT_BYTES`). */
  compactBytes?: number;
  /** The journal's system calls, some replaced (tests provoke faults with it). */
  io?: Partial<JournalIo>;
}

/**
 * The desired state: every accepted cluster, in a snapshot file plus an append-only journal beside it
 * (`<file>.journal`, one line per change), so that a change costs one synced append, not a rewrite of every
 * cluster, and whatever the webhook acknowledged survives a restart or a `kill -9`. The journal is folded
 * into a new snapshot (replaced atomically) every `COMPACT_ENTRIES` lines. An append is refused (and leaves
 * the journal as it was) when the folder lacks room for it and for the compaction after it, or cannot be
 * written. Concurrent changes share one write; reads come from memory.
 */
export class ClusterStore implements DesiredStore {
  private clusters = new Map<string, ClusterRecord>();
  /** `list()`'s answer, kept sorted across changes. */
  private sorted: ClusterRecord[] | undefined;
  private seq = 0;
  private pending: Array<{
    mutate: (draft: Draft) => unknown;
    resolve: (value: unknown) => void;
    reject: (err: unknown) => void;
  }> = [];
  private writing: Promise<void> | undefined;
  private writeError: string | undefined;
  /** The snapshot file's length: a compaction needs room for about as much again, plus the journal. */
  private snapshotBytes = 0;

  private constructor(
    private readonly path: string,
    private readonly disk: AtomicFile,
    private journal: Journal | undefined,
    private readonly options: Required<Omit<StoreOptions, 'io'>>,
  ) {}

  static async open(path: string, options: StoreOptions = {}): Promise<ClusterStore> {
    await mkdir(dirname(path), { recursive: true });
    // A kill -9 between writing a new version and renaming it leaves the temporary file: opening removes it.
    const store = new ClusterStore(path, await AtomicFile.open(path), undefined, {
      compactEntries: options.compactEntries ?? COMPACT_ENTRIES,
      compactBytes: options.compactBytes ?? COMPACT_BYTES,
    });
    const { clusters, seq, journal, replayed, snapshotBytes } = await readState(path);
    for (const c of clusters) store.clusters.set(c.name, c);
    store.seq = seq;
    store.snapshotBytes = snapshotBytes;
    const io = { ...nodeJournalIo, ...options.io };
    store.journal = await Journal.open(journalPath(path), journal, replayed, io);
    return store;
  }

  /** The clusters in a state file (and its journal), read without creating or changing anything. */
  static async read(path: string): Promise<ClusterRecord[]> {
    return (await readState(path, true)).clusters;
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
    } catch (err) {
      return { ok: false, detail: `state folder not writable: ${(err as Error).message}` };
    }
    // A full folder fails the next change: said before one is refused.
    const short = await this.journal?.shortfall(this.snapshotBytes).catch(() => undefined);
    return short ? { ok: false, detail: `state folder full: ${short}` } : { ok: true };
  }

  list(): ClusterRecord[] {
    this.sorted ??= [...this.clusters.values()].sort((a, b) => compareStrings(a.name, b.name));
    return this.sorted.slice();
  }

  get(name: string): ClusterRecord | undefined {
    return this.clusters.get(name);
  }

  /**
   * Inserts or replaces one cluster; resolves once the change is on disk. One process writes this store, and
   * its seen signatures already refuse a replay: the stamp is not needed here.
   */
  upsert(input: Input, _stamp?: WriteStamp, now = Date.now()): Promise<ClusterRecord> {
    return this.change((draft) => {
      const previous = draft.get(input.name);
      const record = recordOf(input, claimedAt(previous, input.host, now), nextStamp(previous, now));
      draft.set(input.name, record);
      return record;
    });
  }

  /** Removes one cluster; resolves with whether it existed, once the change is on disk. */
  delete(name: string, _stamp?: WriteStamp): Promise<boolean> {
    return this.change((draft) => draft.delete(name));
  }

  /** Makes `inputs` the whole desired set (clusters not in it are removed); resolves once on disk. */
  replaceAll(inputs: Input[], _stamp?: WriteStamp, now = Date.now()) {
    return this.change((draft) => {
      const wanted = new Set(inputs.map((i) => i.name));
      const removed = draft.names().filter((name) => !wanted.has(name));
      for (const name of removed) draft.delete(name);
      for (const input of inputs) {
        const previous = draft.get(input.name);
        if (previous && sameInput(previous, input)) continue;
        draft.set(
          input.name,
          recordOf(input, claimedAt(previous, input.host, now), nextStamp(previous, now)),
        );
      }
      return { removed };
    });
  }

  // Group commit: changes that arrive while a write is under way are applied together to a draft and written
  // in one go; each caller resolves once its change is on disk. A failed write rejects the whole batch and
  // changes nothing in memory, nor on disk (a refused append is cut back; failing that, the journal is dirty
  // and the next write is a snapshot numbered past its lines).
  private change<T>(mutate: (draft: Draft) => T): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      this.pending.push({ mutate, resolve: resolve as (value: unknown) => void, reject });
      if (!this.writing) this.writing = this.writePending();
    });
  }

  private async writePending(): Promise<void> {
    while (this.pending.length > 0) {
      const batch = this.pending.splice(0);
      const draft = new Draft(this.clusters);
      const results: unknown[] = [];
      try {
        for (const change of batch) results.push(change.mutate(draft));
        await this.write(draft);
      } catch (err) {
        this.writeError = err instanceof Error ? err.message : String(err);
        for (const change of batch) change.reject(err);
        continue;
      }
      this.writeError = undefined;
      batch.forEach((change, i) => {
        change.resolve(results[i]);
      });
    }
    this.writing = undefined;
  }

  /** Makes the draft durable (a journal append, or a snapshot when the journal is due), then current. */
  private async write(draft: Draft): Promise<void> {
    const journal = this.journal as Journal;
    const entries = draft.entries(this.clusters, this.seq);
    const due =
      journal.dirty ||
      journal.entries + entries.length >= this.options.compactEntries ||
      journal.bytes >= this.options.compactBytes;
    if (!due) {
      try {
        await journal.append(entries, this.snapshotBytes);
      } catch (err) {
        // Should its lines be left (the journal dirty), the next snapshot is numbered past them.
        this.seq += entries.length;
        throw err;
      }
      this.commit(draft, this.seq + entries.length);
      return;
    }
    // The snapshot holds the draft; only once it is in place does the journal go (its lines are at or below
    // the snapshot's seq, so a crash in between replays nothing).
    const next = draft.apply(new Map(this.clusters));
    const seq = this.seq + entries.length;
    const text = snapshotText(seq, next.values());
    await this.disk.write(text);
    this.snapshotBytes = Buffer.byteLength(text);
    this.commit(draft, seq);
    // The change is durable now: a journal that cannot be emptied stays dirty, so the next write is a snapshot.
    await journal.reset().catch(() => {});
  }

  private commit(draft: Draft, seq: number): void {
    draft.apply(this.clusters);
    this.sorted = draft.patchSorted(this.sorted);
    this.seq = seq;
  }
}

const journalPath = (path: string) => `${path}.journal`;

// One cluster a line: quick to write and to read, and still readable.
function snapshotText(seq: number, clusters: Iterable<ClusterRecord>): string {
  const lines = [...clusters].map((c) => JSON.stringify(c));
  return `{"version":1,"seq":${seq},"clusters":[\n${lines.join(',\n')}\n]}\n`;
}

/** The snapshot with the journal's later lines replayed on it. */
async function readState(path: string, mustExist = false) {
  let text: string | undefined;
  try {
    text = await readFile(path, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  }
  const snapshot = text === undefined ? { seq: 0, clusters: [] } : parseStoreFile(path, text);
  const journal = await readJournal(journalPath(path));
  if (mustExist && text === undefined && journal.entries.length === 0)
    throw Object.assign(new Error(`ENOENT: no such file or directory, open '${path}'`), { code: 'ENOENT' });
  const clusters = new Map(snapshot.clusters.map((c) => [c.name, c]));
  let seq = snapshot.seq;
  let replayed = 0;
  for (const e of journal.entries) {
    if (e.seq <= snapshot.seq) continue;
    if ('put' in e) clusters.set(e.put.name, e.put);
    else clusters.delete(e.delete);
    seq = e.seq;
    replayed++;
  }
  const snapshotBytes = text === undefined ? 0 : Buffer.byteLength(text);
  return { clusters: [...clusters.values()], seq, journal, replayed, snapshotBytes };
}

// Each version of a cluster has its own stamp, even two within one millisecond: a pass tells by the stamp
// whether it planned from the version now stored.
function nextStamp(previous: ClusterRecord | undefined, now: number): number {
  return previous ? Math.max(now, previous.updatedAt + 1) : now;
}

function parseStoreFile(path: string, text: string): { seq: number; clusters: ClusterRecord[] } {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (err) {
    throw new Error(`state file ${path} is not JSON: ${(err as Error).message}`);
  }
  const parsed = StoreFile.safeParse(json);
  if (!parsed.success)
    throw new Error(`state file ${path} is not a valid cluster store: ${parsed.error.message}`);
  return { seq: parsed.data.seq ?? 0, clusters: parsed.data.clusters };
}

/** The record of an input: its authorized networks only when it has some (an empty list is no field). */
function recordOf(input: Input, claimed: number, updatedAt: number): ClusterRecord {
  const { name, host, target, authorizedNetworks } = input;
  return {
    name,
    host,
    target,
    ...(authorizedNetworks && authorizedNetworks.length > 0 ? { authorizedNetworks } : {}),
    claimedAt: claimed,
    updatedAt,
  };
}

// A claim on a host dates from when the cluster first asked for that host; a new host is a new claim.
function claimedAt(previous: ClusterRecord | undefined, host: string, now: number): number {
  return previous && previous.host === host ? previous.claimedAt : now;
}

// Lists are canonical and sorted (the webhook's check): the same networks in another order are no change.
function sameInput(a: ClusterRecord, b: Input): boolean {
  return (
    a.host === b.host &&
    JSON.stringify(a.target) === JSON.stringify(b.target) &&
    sameNetworks(a.authorizedNetworks, b.authorizedNetworks)
  );
}
