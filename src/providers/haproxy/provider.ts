import { dirname } from 'node:path';
import type { Logger } from 'pino';
import { PERSIST_DELAY_MS } from '../../config/settings.js';
import { SlotAllowIndex } from '../../haproxy/allow-file.js';
import { parseShowTable } from '../../haproxy/edge.js';
import type { RawState, Tagger } from '../../haproxy/model.js';
import { ConcurrentChangeError, errorText, TerminalError } from '../../model/errors.js';
import { allowMapNameFor, isHaproxyName } from '../../naming/names.js';
import { isAllowOperation } from '../../plan/operations.js';
import type { Plan } from '../../plan/plan.js';
import type { Reading } from '../../plan/reading.js';
import { removeTemporaries } from '../../store/atomic-file.js';
import { type Clock, systemClock } from '../../timing/clock.js';
import { Debounce } from '../../timing/debounce.js';
import { Lane } from '../lane.js';
import type {
  ApplyReport,
  Change,
  CloseOptions,
  Provider,
  ProviderInfo,
  ProviderTraffic,
  RawRead,
} from '../provider.js';
import { runtimeSteps } from '../runtime-steps.js';
import type { StockHaproxyConfig } from './config.js';
import { MasterCli } from './master-cli.js';
import { defaultsNameFor, renderOwnedFile, UnsafeValueError } from './owned-file.js';
import {
  fileStateOf,
  preparePersist,
  removeOldAllowMaps,
  type SlotFilesSeen,
  writeAllowMaps,
  writeMapFiles,
  writePersist,
} from './persist.js';
import { type FileReading, OwnedFileCache, takeReading, workerGeneration } from './read.js';
import { applyByReload } from './reload.js';
import { applyAtRuntime } from './runtime.js';
import { readCommand, type Session } from './session.js';

export interface StockHaproxyDeps {
  logger: Logger;
  /** Whose tags the objects written carry; its id also names the owned file's `defaults`. */
  owner: Tagger;
  /** Counts every master-CLI command and the owned file's bytes when written (the provider metrics). */
  traffic?: ProviderTraffic;
  /** How long after a runtime change the files follow (batched). */
  persistDelayMs?: number;
  /** The timers of persistence (tests fake it). */
  clock?: Clock;
  /** The owner's allow map (the routing's; default: the owner id's). */
  allowMap?: string;
}

/**
 * The provider for a stock HAProxy (`KUBEBYON_PROVIDER=haproxy`): the service owns one configuration file
 * that HAProxy loads as its last `-f`, and talks to HAProxy through the master CLI only. Two paths:
 *
 * - runtime (`runtime.ts`): servers and SNI map entries, through runtime commands on the current worker
 *   first; a command that fails undoes the earlier ones and the apply falls back to a reload. The files
 *   follow (`persist.ts`): batched on the `Debounce`, without a reload; after any full read too, when they
 *   differ from what runs (a crash before the write).
 * - reload (`reload.ts`): anything else. The file rendered from the change's target, `haproxy -c` checked
 *   with the operator's files, put in place atomically (the map file with the new entries first),
 *   `reload` through the master, and confirmed by the new worker running the new structure; a reload
 *   HAProxy refuses puts the previous file back (`ReloadFailedError`, with HAProxy's words on 3.0).
 *
 * Reads (`read.ts`): the owned file gives the structure (frontend, backends, tags); the current worker's
 * `show stat` and `show servers state` what runs. The owned frontend's `id` is a hash of the file's
 * structure, so a file that HAProxy has not loaded is noticed and reloaded rather than trusted.
 * (Over 300 lines: the Provider contract's one class; each path and the reads live in their own modules.)
 */
export class StockHaproxyProvider implements Provider {
  readonly name = 'haproxy';
  private readonly cli: MasterCli;
  private readonly session: Session;
  private readonly owned: OwnedFileCache;
  /** The last read, moved on by every apply since: what HAProxy runs, as far as this provider knows. */
  private latest: FileReading | undefined;
  /** What the last full read took (until `settle` replaces it with the same state, interpreted). */
  private lastRead: FileReading | undefined;
  private readonly persistence: Debounce;
  private readonly defaultsName: string;
  /** One apply at a time (`revision` waits for it); persistence writes in `io`, below. */
  private readonly applies = new Lane();
  /**
   * Persistence's writes, outside the applies' lane: a runtime apply (which writes no file) need not wait for
   * megabytes to reach the disk. What writes files (a reload, the next persistence) waits for them.
   */
  private io: Promise<void> = Promise.resolve();
  /** The owned file's text before and after the write under way: both are ours, not a change by someone. */
  private persisting: { from: string; to: string } | undefined;
  /**
   * How many persistences began or ended: a look at the file across one may have read the text before the
   * write and compared it after (`OwnedFileCache.read` awaits a stat, then the file), so it is not judged.
   */
  private persistEdges = 0;
  /** Moves whenever an apply writes files for a reload; `reloadWriting` while it does. */
  private fileEpoch = 0;
  private reloadWriting = false;
  /** The owned file as this provider last read or wrote it, and how often someone else changed it. */
  private fileSeen: string | undefined;
  private foreignEdits = 0;
  private swept = false;
  /** The logical allow map by slot: the slots' own maps' runtime changes and text (`slot-allow.ts`). */
  private readonly allow = new SlotAllowIndex((detail) => new UnsafeValueError(detail));
  /** The slots' allow maps as last written or found on disk (forgotten on every full read). */
  private readonly slotFiles: SlotFilesSeen = new Map();

  constructor(
    private readonly config: StockHaproxyConfig,
    private readonly deps: StockHaproxyDeps,
  ) {
    this.cli = new MasterCli(config.masterSocket, undefined, deps.traffic);
    this.session = { config, cli: this.cli, logger: deps.logger, traffic: deps.traffic };
    this.defaultsName = defaultsNameFor(deps.owner.id);
    this.owned = new OwnedFileCache(
      config.ownedFile,
      this.defaultsName,
      dirname(config.ownedFile),
      deps.allowMap ?? allowMapNameFor(deps.owner.id),
    );
    const delay = deps.persistDelayMs ?? PERSIST_DELAY_MS;
    this.persistence = new Debounce(
      deps.clock ?? systemClock,
      { debounceMs: delay, maxDelayMs: Math.max(1_000, delay) },
      () => this.persistLatest(),
    );
  }

  async ping(signal: AbortSignal): Promise<ProviderInfo> {
    const answer = (await readCommand(this.session, 'show version', signal)).trim();
    if (!/^[0-9]+\.[0-9]+/.test(answer))
      throw new Error(`unexpected answer to show version: ${answer.slice(0, 100)}`);
    return { version: `HAProxy ${answer.split('\n')[0]}`, endpoint: this.config.masterSocket };
  }

  /**
   * The master's reload count, the current worker and its start (any reload or restart, by anyone, moves
   * them), and how often someone else changed the owned file. Waits for an apply under way: its reload moves
   * the count, and only its answer says that the new revision is this service's own (the revision watch
   * polling meanwhile took it for a reload by someone else, and asked for a full read and a repair pass).
   */
  async revision(signal: AbortSignal): Promise<string> {
    await this.applies.idle();
    return this.revisionNow(signal);
  }

  private async revisionNow(signal: AbortSignal): Promise<string> {
    const edges = this.persistEdges;
    // Independent facts, asked together: a list change waits for this before its runtime commands.
    const [g, { text }] = await Promise.all([workerGeneration(this.session, signal), this.owned.read()]);
    const ours =
      text === this.fileSeen ||
      (this.persisting && (text === this.persisting.from || text === this.persisting.to)) ||
      edges !== this.persistEdges;
    if (!ours) {
      if (this.fileSeen !== undefined) this.foreignEdits++;
      this.fileSeen = text;
    }
    return `${g.reloads}:${g.worker ?? 'none'}:${g.startedAt ?? 'unknown'}:${this.foreignEdits}`;
  }

  async read(signal: AbortSignal): Promise<RawRead> {
    const revision = await this.revision(signal);
    // Not across a persistence's write: a text read before it, kept after it, would make the next
    // persistence take the file for someone else's and drop all it knows (a full pass more).
    for (let attempt = 1; ; attempt++) {
      await this.io;
      const edges = this.persistEdges;
      const reading = await takeReading(this.session, this.owned, signal);
      if (edges !== this.persistEdges && attempt < 3) continue;
      // The slots' files are compared with the disk again by the next persistence.
      this.slotFiles.clear();
      this.latest = reading;
      this.lastRead = reading;
      this.fileSeen = reading.text;
      return { raw: reading.raw, revision };
    }
  }

  /**
   * What runs and what the files say may differ (a crash before persistence): the files catch up now.
   * Rendered from `read`'s interpreted state, the very objects the next applies derive theirs from, so that
   * the owned file's per-backend caches (`owned-file.ts`) serve every later persistence: rendered from the
   * raw objects instead, the first persistence after each full read rendered all N backends again (about
   * 75 MB of garbage at N = 20000, `bench/zero-reload-compare.ts`).
   */
  async settle(read: Reading): Promise<void> {
    const latest = this.latest;
    if (!latest?.consistent) return;
    // An apply since the read has moved `latest` on: it is the newer state, and is interpreted already.
    const reading = latest === this.lastRead ? { ...latest, raw: read.state } : latest;
    this.latest = reading;
    this.lastRead = undefined;
    await this.persist(reading);
    await this.io;
  }

  async apply(plan: Plan, change: Change, signal: AbortSignal): Promise<ApplyReport> {
    signal.throwIfAborted();
    if (plan.operations.length === 0) return { reload: 'none', requests: 0 };
    return this.applies.run(() => this.applyNow(plan, change, signal));
  }

  /** Writes now what runtime applies left unpersisted (unless told not to), and stops the timer. */
  async close(options: CloseOptions = {}): Promise<void> {
    if (options.persist !== false) await this.persistence.flush();
    await this.persistence.close();
    await this.io;
  }

  /** Whatever runtime applies have not yet written to the files, written now (tests, shutdown). */
  async flush(): Promise<void> {
    await this.persistence.flush();
    await this.io;
  }

  private async applyNow(plan: Plan, change: Change, signal: AbortSignal): Promise<ApplyReport> {
    signal.throwIfAborted();
    await this.sweepOnce();
    const sentBefore = this.cli.sent;
    const requests = () => this.cli.sent - sentBefore;
    const reading = this.latest;
    if (!reading || (await this.revisionNow(signal)) !== change.revision)
      throw new ConcurrentChangeError('HAProxy or the owned file changed since the plan was made');
    const target = change.to.state;

    const steps = reading.consistent ? runtimeSteps(plan, change.from) : undefined;
    if (steps) {
      try {
        await applyAtRuntime(this.session, steps, change.from, signal, this.allow);
        // From `latest` as it is now, not as this apply found it: a persistence that wrote the file meanwhile
        // moved it to the new text, and a stale text here made the next persistence take the file for someone
        // else's and drop everything known (a full pass, 0.9 s at 20000: the burst of `bench/zero-reload.ts`).
        // Gone meanwhile (a failed persistence), it stays gone: the next pass reads everything.
        const now = this.latest;
        this.latest = now && { ...now, raw: target };
        // A list change is in the files before it is acknowledged: a reload while no service runs (killed
        // right after) must not bring back a list that was narrowed. Routes batch.
        const lists = plan.operations.filter(isAllowOperation).length;
        if (lists > 0 && lists === plan.operations.length && !this.persistence.pending) {
          // Only lists changed, and the files hold every route: the allow maps alone are written.
          await this.io;
          const write = this.guard(() =>
            writeAllowMaps(this.session, plan, change.from.state, target, this.allow, this.slotFiles),
          );
          this.io = write.catch(() => {});
          await write.catch((err) => {
            this.persistFailed(err);
            throw err;
          });
        } else if (lists > 0) {
          // Routes changed with the lists (or wait in the batch): all the files, in their order.
          await this.persist(this.latest ?? { ...reading, raw: target });
          await this.io;
        } else this.persistence.schedule();
        return { reload: 'none', requests: requests(), revision: change.revision };
      } catch (err) {
        if (signal.aborted) throw err;
        this.deps.logger.warn(
          { err: errorText(err) },
          'runtime change failed; applying it with a reload instead',
        );
      }
    }
    // After a reload (or a failed one) the next read reads everything again.
    this.latest = undefined;
    this.fileEpoch++;
    this.reloadWriting = true;
    try {
      await this.io;
      const { fileState, text } = this.render(reading, plan, target);
      const restoreMaps = await this.guard(() =>
        writeMapFiles(this.session, fileState, target.maps, this.allow, this.slotFiles),
      );
      try {
        await applyByReload(this.session, reading.text, fileState, text, signal);
      } catch (err) {
        await restoreMaps();
        throw err;
      }
      // HAProxy runs the file as rendered: the target, every server and entry in the files.
      await removeOldAllowMaps(this.session, fileState);
      this.fileSeen = text;
      this.owned.remember(text, fileState);
      this.latest = {
        text,
        raw: target,
        inFile: new Set(fileState.frontends.map((f) => f.name).concat(fileState.backends.map((b) => b.name))),
        consistent: true,
      };
    } finally {
      this.reloadWriting = false;
      this.fileEpoch++;
    }
    const revision = await this.revisionNow(AbortSignal.timeout(this.config.reloadTimeoutMs)).catch(
      () => undefined,
    );
    return { reload: 'succeeded', requests: requests(), ...(revision !== undefined ? { revision } : {}) };
  }

  private async persistLatest(): Promise<void> {
    const reading = this.latest;
    if (reading) await this.persist(reading);
    await this.io;
  }

  /**
   * Renders what `reading` says runs, outside the apply queue (a runtime apply writes no file, and need not
   * wait for thousands of sections to render); the writes then go on in `io`, one persistence at a time.
   * A reload's apply writes files itself: a persistence rendered while one was under way is dropped.
   * Resolves once the writes have started.
   */
  private async persist(reading: FileReading): Promise<void> {
    await this.io;
    const epoch = this.fileEpoch;
    let w: Awaited<ReturnType<typeof preparePersist>>;
    try {
      w = await this.guard(() => preparePersist(this.session, this.owned, reading, this.defaultsName));
    } catch (err) {
      this.persistFailed(err);
      return;
    }
    // The file changed under us: nothing of what this provider knows is trusted until a full read.
    if (w === 'changed') {
      if (this.latest === reading) this.latest = undefined;
      return;
    }
    if (w === 'nothing' || epoch !== this.fileEpoch || this.reloadWriting) return;
    const from = reading.text;
    const to = w.text ?? from;
    this.persisting = { from, to };
    this.persistEdges++;
    const write = w;
    this.io = this.guard(() =>
      writePersist(this.session, this.owned, reading, write, this.allow, this.slotFiles),
    )
      .then(
        () => {
          this.fileSeen = to;
          // Applies since moved `latest` on from the same file: it holds the new text now.
          if (this.latest && this.latest.text === from) this.latest = { ...this.latest, text: to };
        },
        (err) => this.persistFailed(err),
      )
      .finally(() => {
        this.persisting = undefined;
        this.persistEdges++;
      });
  }

  /** The refusals table's entries (`show table`): slot -> connections refused. */
  async refusals(table: string, signal: AbortSignal): Promise<Map<string, number>> {
    if (!isHaproxyName(table))
      throw new UnsafeValueError(`refusing to send table name ${JSON.stringify(table)}`);
    return parseShowTable(await readCommand(this.session, `@1 show table ${table}`, signal));
  }

  /** A persistence that failed: nothing this provider knows is trusted until a full read. */
  private persistFailed(err: unknown): void {
    this.latest = undefined;
    this.deps.logger.error({ err: errorText(err) }, 'could not write the runtime state to the files');
  }

  /**
   * Before this service's first write to the owned file, nothing of its own can be in flight: a candidate
   * file beside it is what a killed predecessor left between writing and checking it.
   */
  private async sweepOnce(): Promise<void> {
    if (this.swept) return;
    this.swept = true;
    const removed = await removeTemporaries(this.config.ownedFile);
    if (removed.length > 0)
      this.deps.logger.info({ removed }, 'removed temporary files of an interrupted apply');
  }

  /** The owned file for the part of `target` (the plan applied to what was read) that lives in the file. */
  private render(reading: FileReading, plan: Plan, target: RawState): { fileState: RawState; text: string } {
    const inFile = new Set<string>(reading.inFile);
    for (const op of plan.operations) {
      if (op.kind === 'create_frontend') inFile.add(op.frontend.name);
      if (op.kind === 'create_backend') inFile.add(op.backend.name);
    }
    const fileState = fileStateOf(target, inFile);
    const text = this.guardSync(() =>
      renderOwnedFile(fileState, this.defaultsName, dirname(this.config.ownedFile)),
    );
    return { fileState, text };
  }

  /** A value the files must not hold is a plan that retrying cannot fix. */
  private async guard<T>(f: () => Promise<T>): Promise<T> {
    try {
      return await f();
    } catch (err) {
      if (err instanceof UnsafeValueError) throw new TerminalError(err.message);
      throw err;
    }
  }

  private guardSync<T>(f: () => T): T {
    try {
      return f();
    } catch (err) {
      if (err instanceof UnsafeValueError) throw new TerminalError(err.message);
      throw err;
    }
  }
}
