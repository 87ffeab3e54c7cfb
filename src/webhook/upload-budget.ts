/** One body being received before its signature can be checked. */
export interface Upload {
  /** Aborted when a newer upload needs the room this one holds: it is then refused (503). */
  readonly signal: AbortSignal;
  /** Counts `bytes` more received; false when they do not fit even after older uploads made room. */
  charge(bytes: number): boolean;
  /** Gives back what it holds: call once it is verified, refused or gone. */
  leave(): void;
}

interface Entry {
  order: number;
  bytes: number;
  controller: AbortController;
}

/**
 * The memory that bodies not yet verified may hold together, counted in bytes actually received. A slot
 * per connection was a lock anyone could hold: sixteen connections that each sent one byte of a body
 * refused every signed write for ten seconds. Counting bytes, a connection that sends nothing holds
 * nothing; and when the bytes run out, the oldest uploads are cut off so that a newer one can go on. To
 * keep a signed write out, a client must then send more than the whole budget while that write is
 * being received (16 MiB within the few milliseconds a write takes on a cluster network).
 */
export class UploadBudget {
  private readonly uploads = new Map<number, Entry>();
  private used = 0;
  private started = 0;

  constructor(private readonly maxBytes: number) {}

  /** Bytes held by unverified bodies now. */
  get bytes(): number {
    return this.used;
  }

  enter(): Upload {
    const entry: Entry = { order: this.started++, bytes: 0, controller: new AbortController() };
    this.uploads.set(entry.order, entry);
    return {
      signal: entry.controller.signal,
      charge: (bytes) => this.charge(entry, bytes),
      leave: () => this.release(entry),
    };
  }

  private charge(entry: Entry, bytes: number): boolean {
    if (!this.uploads.has(entry.order)) return false;
    entry.bytes += bytes;
    this.used += bytes;
    // Map order is arrival order: the first entries are the oldest.
    for (const older of this.uploads.values()) {
      if (this.used <= this.maxBytes) return true;
      if (older.order >= entry.order) return false;
      this.release(older);
      older.controller.abort();
    }
    return this.used <= this.maxBytes;
  }

  private release(entry: Entry): void {
    if (!this.uploads.delete(entry.order)) return;
    this.used -= entry.bytes;
  }
}
