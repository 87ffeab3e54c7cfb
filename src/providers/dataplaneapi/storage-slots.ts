import type { HaproxyState, RawState } from '../../haproxy/model.js';
import { TerminalError } from '../../model/errors.js';
import type { Reading } from '../../plan/reading.js';
import type { DataplaneClient } from './client.js';
import { type Files, putBack } from './files.js';
import type { Pending } from './persist.js';
import type { Counter, Workers } from './reload.js';
import { runsBackend } from './runtime-reads.js';
import { byName, fileBackendNames, type SlotsFile } from './slots.js';

/**
 * The slot backends in the API's general storage (`KUBEBYON_DATAPLANE_SLOTS=storage`) as the provider sees
 * them: merged into what it reads, moved there from the configuration once (the upgrade from `config`), and
 * checked to run after a reload, since HAProxy loads them only when started with a second `-f` naming the
 * storage directory. `slots.ts` keeps the files themselves.
 */
export class StorageSlots {
  constructor(
    private readonly client: DataplaneClient,
    private readonly workers: Workers,
    private readonly files: Files,
    readonly file: SlotsFile,
  ) {}

  /** `raw` (the configuration as read) with the files' backends. */
  async merge(raw: RawState, signal: AbortSignal, counter: Counter): Promise<RawState> {
    const file = await this.file.backends(signal, counter, true);
    if (file.size === 0) return raw;
    const inConfig = new Set(raw.backends.map((b) => b.name));
    const backends = [...raw.backends, ...[...file.values()].filter((b) => !inConfig.has(b.name))];
    return { ...raw, backends: backends.sort(byName) };
  }

  /** Slot backends of `reading` that the configuration (`config`, as last read) still holds. */
  misplaced(reading: Reading, config: RawState): Set<string> {
    const inConfig = new Set(config.backends.map((b) => b.name));
    return new Set([...fileBackendNames(reading.state)].filter((n) => inConfig.has(n)));
  }

  /**
   * Moves `moving` from the configuration to the files with one reload, files first; if HAProxy then does
   * not run them, puts them back and refuses with the fix.
   */
  async relocate(
    reading: Reading,
    moving: ReadonlySet<string>,
    pending: Pending,
    draining: ReadonlySet<string>,
    signal: AbortSignal,
    counter: Counter,
  ): Promise<void> {
    const write = {
      target: reading.state,
      frontends: new Set<string>(),
      backends: moving,
      maps: pending.maps,
    };
    await this.files.write({ ...write, draining, reload: true, relocate: true }, signal, counter);
    const [first] = moving;
    if (first !== undefined && (await this.runs(first, signal, counter)) === false) {
      await putBack(this.files, this.file, reading.state, moving, signal, counter);
      throw this.notLoaded();
    }
  }

  /** Refuses, with the fix, when HAProxy did not load the files with the reload just made. */
  async ensureLoaded(target: HaproxyState, signal: AbortSignal, counter: Counter): Promise<void> {
    const [first] = this.file.current?.keys() ?? [];
    if (first === undefined || !target.backends.some((b) => b.name === first)) return;
    if ((await this.runs(first, signal, counter)) === false) throw this.notLoaded();
  }

  private notLoaded(): TerminalError {
    return new TerminalError(
      `HAProxy does not load the slots files (${this.file.fileName(0)}, ...): start it with a second -f naming ` +
        "the Data Plane API's general storage directory (its resources.general_storage_dir), or set " +
        'KUBEBYON_DATAPLANE_SLOTS=config',
    );
  }

  /**
   * Whether HAProxy runs backend `name`: undefined when unknown (HAProxy 2.6, whose runtime reads through the
   * API answer nothing usable). An unknown backend is answered `no data for <name>: not found` (404 on
   * v3.4, 500 on v3.0.23); an empty one `[]`.
   */
  private async runs(name: string, signal: AbortSignal, counter: Counter): Promise<boolean | undefined> {
    if (this.workers.runtimeServers === false) return undefined;
    return runsBackend(this.client, name, signal, counter);
  }
}
