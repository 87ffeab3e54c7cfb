import type { ConfigReads } from './read.js';
import type { Counter, Workers } from './reload.js';

/**
 * The provider's revision token: HAProxy's process (a reload or restart by anyone starts another) and how
 * often someone else wrote the configuration, that is its version moving past the one this provider last
 * read or wrote. One request per look: the runtime's info, whose answer carries the configuration's version
 * (a second request for the version only if the header is missing).
 */
export class Revision {
  private version: number | undefined;
  private foreignWrites = 0;
  /**
   * A batched persistence is writing (the version it moves is ours, not someone else's), and how many have
   * begun or ended: a version looked at across one of them is not compared.
   */
  private persisting = false;
  private edges = 0;

  constructor(
    private readonly workers: Workers,
    private readonly reads: ConfigReads,
  ) {}

  /** The token now. */
  async now(signal: AbortSignal, counter: Counter): Promise<string> {
    // While a persistence of ours writes, the API answers nothing until it has parsed the whole file (hundreds
    // of ms at 20000 slots), and the version moves by our own hand: the token is the last one seen, and the
    // next look after the write compares both (someone else's write or reload meanwhile is seen then, as one
    // just after this look would be).
    const last = this.workers.lastGeneration;
    if (this.persisting && last !== undefined) return `${last}:${this.foreignWrites}`;
    const edges = this.edges;
    const { generation, version: sent } = await this.workers.current(signal, counter);
    const version = sent ?? (await this.reads.version(signal, counter));
    // A persistence began or ended meanwhile: the version may be ours or not, and is compared next time.
    if (edges !== this.edges) return `${generation}:${this.foreignWrites}`;
    if (this.version !== undefined && version !== this.version) this.foreignWrites++;
    this.version = version;
    return `${generation}:${this.foreignWrites}`;
  }

  /** Our own write left the configuration at `version` (undefined: read it at the next look). */
  wrote(version: number | undefined): void {
    this.version = version;
  }

  /** Runs a batched persistence: the version it moves is ours. */
  async persist<T>(write: () => Promise<T>): Promise<T> {
    this.persisting = true;
    this.edges++;
    try {
      return await write();
    } finally {
      this.persisting = false;
      this.edges++;
    }
  }
}
