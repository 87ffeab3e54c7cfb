import type { Owner, RawState } from '../../haproxy/model.js';
import { ConcurrentChangeError } from '../../model/errors.js';
import type { TagStore } from './capability.js';
import { type DataplaneClient, versionOf } from './client.js';
import type { MapNames } from './map-names.js';
import { readState, type Snapshot } from './mapping.js';

const READ_ATTEMPTS = 3;

/**
 * Reads, cached by configuration version: two `full_section` lists (frontends, backends), skipped while the
 * version has not moved. Remembers the API's objects behind each state handed out, for the apply handed
 * that state back.
 */
export class Reads {
  private snapshot: Snapshot | undefined;
  private state: RawState | undefined;
  private readonly handedOut = new WeakMap<RawState, Snapshot>();

  constructor(
    private readonly client: DataplaneClient,
    private readonly owner: Owner,
    /** Where the API keeps tags; known once the API has been checked, before the first read. */
    private readonly tags: () => TagStore,
    /** The logical names of SNI maps, for frontends that route by one. */
    private readonly names?: MapNames,
    /**
     * Called when the version moved: resolves true once a write of ours that was under way has ended (its
     * answer tells what the API now holds, so the lists need not be read again), false when none was.
     */
    private readonly settle: () => Promise<boolean> = async () => false,
  ) {}

  /** The state as of now, a copy of its own for the caller. */
  async handOut(signal: AbortSignal): Promise<RawState> {
    return this.handOutFrom(await this.read(signal));
  }

  /** The state of `snapshot` (a read of this object's), a copy of its own for the caller. */
  handOutFrom(snapshot: Snapshot): RawState {
    const read = () => readState(snapshot, this.owner, this.tags(), this.names);
    let raw: RawState;
    if (this.snapshot === snapshot) {
      // The kept snapshot's state is made once, and copied for each caller (a caller completes its own).
      this.state ??= read();
      raw = structuredClone(this.state);
    } else raw = read();
    this.register(raw, snapshot);
    return raw;
  }

  /** `raw` was made from `snapshot` (a state the provider built from it): an apply handed it finds it. */
  register(raw: RawState, snapshot: Snapshot): void {
    this.handedOut.set(raw, snapshot);
  }

  /**
   * The objects a state handed out was read from; a state this provider did not hand out is read again. A
   * snapshot older than the API's version makes the writes fail on it and the pass plan again.
   */
  async snapshotOf(current: RawState, signal: AbortSignal): Promise<Snapshot> {
    return this.handedOut.get(current) ?? (await this.read(signal));
  }

  /** The configuration as of now: the cached read while the version has not moved, else the two lists. */
  async read(signal: AbortSignal): Promise<Snapshot> {
    let settled = false;
    for (let attempt = 1; ; attempt++) {
      const { data: version } = await this.client.GET('/services/haproxy/configuration/version', { signal });
      if (this.snapshot && this.snapshot.version === version) return this.snapshot;
      // Our own persistence may have moved it and be about to say so: reading both lists then costs a parse
      // of thousands of slots on both sides, and the state kept with them.
      if (!settled && this.snapshot && (await this.settle())) {
        settled = true;
        attempt--;
        continue;
      }
      const query = { query: { full_section: true } };
      const [frontends, backends] = await Promise.all([
        this.client.GET('/services/haproxy/configuration/frontends', { params: query, signal }),
        this.client.GET('/services/haproxy/configuration/backends', { params: query, signal }),
      ]);
      const vf = versionOf(frontends.headers);
      const vb = versionOf(backends.headers);
      // Both lists must come from one version, or the state read would be a mix of two configurations.
      if (vf !== undefined && vf === vb) {
        const snapshot = { version: vf, frontends: frontends.data, backends: backends.data };
        this.keep(snapshot);
        return snapshot;
      }
      if (attempt >= READ_ATTEMPTS)
        throw new ConcurrentChangeError('the configuration kept changing while it was read');
    }
  }

  /**
   * What the API holds now, when known (our own writes applied to what was read); else nothing is kept. Its
   * state is made when first handed out: with map routing each persistence keeps a snapshot, and most are
   * never handed out (reading 30000 slots into a state held the event loop 42-67 ms each time).
   */
  keep(snapshot: Snapshot | undefined): void {
    this.snapshot = snapshot;
    this.state = undefined;
  }

  /** The objects last read or kept, if any. */
  get current(): Snapshot | undefined {
    return this.snapshot;
  }

  /** What was read no longer tells what is there: the next read lists both sections again. */
  forget(): void {
    this.keep(undefined);
  }
}
