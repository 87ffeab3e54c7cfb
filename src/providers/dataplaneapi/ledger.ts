import { readFile } from 'node:fs/promises';
import { AtomicFile } from '../../store/atomic-file.js';

/**
 * The ids of the transactions this service has open, on disk, so that a crash (kill -9) between opening one
 * and committing or dropping it cannot leak it past the next start: the API never expires open transactions,
 * and 20 leaked ones block every writer (429). Without a file it only remembers in memory.
 */
export class TransactionLedger {
  private ids = new Set<string>();
  private loading: Promise<AtomicFile | undefined> | undefined;

  constructor(
    private readonly file: string | undefined,
    /** The API the ids were opened on, for whoever reads the file (an id unknown to the API is just gone). */
    private readonly api: string,
  ) {}

  /** Ids left by an earlier run against the same API. */
  async leftovers(): Promise<string[]> {
    await this.load();
    return [...this.ids];
  }

  async add(id: string): Promise<void> {
    await this.load();
    this.ids.add(id);
    await this.save();
  }

  async remove(id: string): Promise<void> {
    await this.load();
    if (!this.ids.delete(id)) return;
    await this.save();
  }

  // Once, before anything is written: every use awaits it, so no write of this run can be under way when it
  // sweeps what a killed run left beside the file.
  private load(): Promise<AtomicFile | undefined> {
    // A failed read (the folder unreadable) is tried again by the next use.
    this.loading ??= this.read().catch((err) => {
      this.loading = undefined;
      throw err;
    });
    return this.loading;
  }

  private async read(): Promise<AtomicFile | undefined> {
    if (!this.file) return undefined;
    const disk = await AtomicFile.open(this.file);
    try {
      const parsed = JSON.parse(await readFile(this.file, 'utf8')) as { open?: unknown };
      if (Array.isArray(parsed.open))
        for (const id of parsed.open)
          if (typeof id === 'string' && /^[A-Za-z0-9-]{1,64}$/.test(id)) this.ids.add(id);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    }
    return disk;
  }

  // One write at a time (a transaction opened ahead is recorded while another is removed), each writing the
  // ids as they are when it runs.
  private saving: Promise<void> = Promise.resolve();
  private save(): Promise<void> {
    const next = this.saving.then(async () =>
      (await this.load())?.write(`${JSON.stringify({ api: this.api, open: [...this.ids] })}\n`),
    );
    this.saving = next.catch(() => {});
    return next;
  }
}
