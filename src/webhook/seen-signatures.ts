import { open, readFile } from 'node:fs/promises';
import { AtomicFile } from '../store/atomic-file.js';

const LINE = /^([0-9]{1,12}) (sha256=[0-9a-f]{64})$/;
// Rewrite the file once it holds this many lines more than are still live.
const COMPACT_SLACK = 1000;
/**
 * How much longer than the window a signature is kept. The window test and the claim share one clock
 * reading, so this is not needed for that; it covers a clock stepped forward and back (an NTP correction),
 * which would otherwise drop signatures a later reading finds inside the window again.
 */
export const RETENTION_MARGIN_SECONDS = 60;

/**
 * Signatures of writes accepted within the replay window, with their timestamps, so that a captured write
 * cannot be replayed. With a file, a claim is on disk (appended and fsynced) before it is granted, and the
 * file is read at start: a restart does not reopen the window. Appends are batched: claims that arrive
 * while one fsync runs share the next.
 */
export class SeenSignatures {
  private readonly seen = new Map<string, number>();
  private lines = 0;
  private pending: string[] = [];
  private waiters: Array<{ resolve(): void; reject(err: unknown): void }> = [];
  private flushing: Promise<void> | undefined;
  private writeError: string | undefined;
  private disk: AtomicFile | undefined;

  constructor(
    private readonly windowSeconds: number,
    private readonly file?: string,
  ) {}

  /** Loads `file` (created if missing), keeping only entries still inside the window (and its margin). */
  static async open(file: string, windowSeconds: number, nowSeconds: number): Promise<SeenSignatures> {
    const s = new SeenSignatures(windowSeconds, file);
    let text = '';
    try {
      text = await readFile(file, 'utf8');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    }
    // A torn last line (a crash mid-append) matches nothing; that claim was never granted.
    for (const line of text.split('\n')) {
      const m = LINE.exec(line);
      if (m?.[1] && m[2]) s.seen.set(m[2], Number(m[1]));
    }
    s.forgetExpired(nowSeconds);
    s.disk = await AtomicFile.open(file);
    await s.compact();
    return s;
  }

  /** True, once recorded, when `signature` was not seen in the window; false for a replay. */
  async claim(signature: string, sentSeconds: number, nowSeconds: number): Promise<boolean> {
    this.forgetExpired(nowSeconds);
    if (this.seen.has(signature)) return false;
    // Recorded before the fsync, so that a concurrent duplicate is refused too.
    this.seen.set(signature, sentSeconds);
    if (this.file) {
      try {
        await this.append(`${sentSeconds} ${signature}\n`);
      } catch (err) {
        // Not recorded, so the call is not acted on either: its retry must not count as a replay.
        this.seen.delete(signature);
        throw err;
      }
    }
    return true;
  }

  /** Whether claims can be recorded: the last append succeeded, or the folder takes a write again. */
  async health(): Promise<{ ok: boolean; detail?: string }> {
    if (!this.file || this.writeError === undefined) return { ok: true };
    try {
      // An empty line, in line with the claims' appends (the reader skips it): whether they would work now.
      await this.append('\n');
      return { ok: true };
    } catch {
      return { ok: false, detail: `cannot record seen signatures: ${this.writeError}` };
    }
  }

  private forgetExpired(nowSeconds: number): void {
    for (const [signature, sent] of this.seen) {
      if (nowSeconds - sent > this.windowSeconds + RETENTION_MARGIN_SECONDS) this.seen.delete(signature);
    }
  }

  private append(line: string): Promise<void> {
    return new Promise((resolve, reject) => {
      this.pending.push(line);
      this.waiters.push({ resolve, reject });
      this.flushing ??= this.flush();
    });
  }

  private async flush(): Promise<void> {
    while (this.pending.length > 0) {
      const lines = this.pending.splice(0);
      const waiters = this.waiters.splice(0);
      try {
        const handle = await open(this.file as string, 'a', 0o600);
        try {
          await handle.writeFile(lines.join(''), 'utf8');
          await handle.datasync();
        } finally {
          await handle.close();
        }
        this.lines += lines.length;
        this.writeError = undefined;
        for (const w of waiters) w.resolve();
      } catch (err) {
        this.writeError = err instanceof Error ? err.message : String(err);
        for (const w of waiters) w.reject(err);
        continue;
      }
      // Not fatal: the appended lines are on disk; a failed rewrite is tried again after the next append.
      if (this.lines > this.seen.size + COMPACT_SLACK) await this.compact().catch(() => {});
    }
    this.flushing = undefined;
  }

  private async compact(): Promise<void> {
    const live = [...this.seen].map(([signature, sent]) => `${sent} ${signature}\n`);
    await this.disk?.write(live.join(''));
    this.lines = live.length;
  }
}
