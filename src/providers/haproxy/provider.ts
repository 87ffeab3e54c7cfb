import { dirname } from 'node:path';
import type { Logger } from 'pino';
import type { Owner, RawState } from '../../haproxy/model.js';
import { errorText, TerminalError } from '../../model/errors.js';
import { applyOperations } from '../../plan/apply.js';
import type { Plan } from '../../plan/plan.js';
import { removeTemporaries } from '../../store/atomic-file.js';
import { type Clock, systemClock } from '../../timing/clock.js';
import { Debounce } from '../../timing/debounce.js';
import type {
  ApplyReport,
  CloseOptions,
  Provider,
  ProviderInfo,
  ProviderTraffic,
  ReadOptions,
} from '../provider.js';
import type { StockHaproxyConfig } from './config.js';
import { MasterCli } from './master-cli.js';
import { defaultsNameFor, renderOwnedFile, UnsafeValueError } from './owned-file.js';
import { fileStateOf, preparePersist, writeMapFiles, writePersist } from './persist.js';
import { OwnedFileCache, type Reading, takeReading, unchangedSince, workerGeneration } from './read.js';
import { applyByReload } from './reload.js';
import { applyAtRuntime, runtimeOnly } from './runtime.js';
import { readCommand, type Session } from './session.js';

export interface StockHaproxyDeps {
  logger: Logger;
  /** Whose tags the objects written carry; its id also names the owned file's `defaults`. */
  owner: Owner;
  /** Counts every master-CLI command and the owned file's bytes when written (the provider metrics). */
  traffic?: ProviderTraffic;
  /** How long after a runtime change the files follow (batched); see `ProviderDeps.persistDelayMs`. */
  persistDelayMs?: number;
  /** The timers of persistence (tests fake it). */
  clock?: Clock;
}

/**
 * The provider for a stock HAProxy (`KUBEBYON_PROVIDER=haproxy`): the service owns one configuration file
 * that HAProxy loads as its last `-f`, and talks to HAProxy through the master CLI only.
 *
 * - read (`read.ts`): the owned file gives the structure (frontend, rules, backends, tags); the current
 *   worker's `show stat` and `show servers state` give what runs (servers as the runtime API left them, and
 *   the foreign proxies, untagged). The owned frontend's `id` is a hash of the file's structure, so a file
 *   that HAProxy has not loaded is noticed and reloaded rather than trusted.
 * - apply, servers and SNI map entries only (`runtime.ts`): runtime commands on the current worker; a
 *   command that fails undoes the earlier ones and the apply falls back to a reload. The files follow
 *   (`persist.ts`): batched, ~100 ms later, without a reload; any full read also writes them when they differ
 *   from what runs (a crash before the write).
 * - reads: a full read (`fresh`, or after any reload or file change) reads every server and map entry; else
 *   the last read advanced by the applies made since answers, when `show proc` and the owned file prove that
 *   nothing else changed HAProxy.
 * - apply, anything else (`reload.ts`): render the file, `haproxy -c` it with the operator's files, put it
 *   in place atomically (the map file with the new entries first), `reload` through the master, and confirm that the new worker runs the new
 *   structure; a reload HAProxy refuses puts the previous file back (`ReloadFailedError`, with HAProxy's
 *   words on 3.0).
 */
export class StockHaproxyProvider implements Provider {
  readonly name = 'haproxy';
  private readonly cli: MasterCli;
  private readonly session: Session;
  private readonly owned: OwnedFileCache;
  /** What each read found besides its raw state, for the apply handed that state (`apply(plan, current)`). */
  private readonly reads = new WeakMap<RawState, Reading>();
  /** The last read, advanced by every runtime apply since: what HAProxy runs, as far as this provider knows. */
  private latest: Reading | undefined;
  private readonly persistence: Debounce;
  private readonly defaultsName: string;
  private queue: Promise<unknown> = Promise.resolve();
  /**
   * Persistence's writes, outside the queue: a runtime apply (which writes no file) need not wait for
   * megabytes to reach the disk. What writes files (a reload, the next persistence) waits for them.
   */
  private io: Promise<void> = Promise.resolve();
  /** The owned file's text before and after the write under way: both are ours, not a change by someone. */
  private persisting: { from: string; to: string } | undefined;
  /** Moves whenever an apply writes files for a reload; `reloadWriting` while it does. */
  private fileEpoch = 0;
  private reloadWriting = false;
  private swept = false;

  constructor(
    private readonly config: StockHaproxyConfig,
    private readonly deps: StockHaproxyDeps,
  ) {
    this.cli = new MasterCli(config.masterSocket, undefined, deps.traffic);
    this.session = { config, cli: this.cli, logger: deps.logger, traffic: deps.traffic, owner: deps.owner };
    this.defaultsName = defaultsNameFor(deps.owner.id);
    this.owned = new OwnedFileCache(config.ownedFile, this.defaultsName, dirname(config.ownedFile));
    const delay = deps.persistDelayMs ?? 100;
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

  /** The master's reload count, the current worker and its start: any reload or restart, by anyone, changes it. */
  async revision(signal: AbortSignal): Promise<string> {
    const g = await workerGeneration(this.session, signal);
    return `${g.reloads}:${g.worker ?? 'none'}:${g.startedAt ?? 'unknown'}`;
  }

  async readState(signal: AbortSignal, options: ReadOptions = {}): Promise<RawState> {
    const last = this.latest;
    if (!options.fresh && last && (await unchangedSince(this.session, this.owned, last, signal, this.ours))) {
      // An apply may have advanced it meanwhile: that one is as current.
      const now = this.latest ?? last;
      this.reads.set(now.raw, now);
      return now.raw;
    }
    const reading = await takeReading(this.session, this.owned, signal);
    this.latest = reading;
    this.reads.set(reading.raw, reading);
    // What runs and what the files say may differ (a crash before persistence): the files catch up.
    if (reading.consistent) {
      if (this.latest === reading) await this.persist(reading);
      await this.io;
    }
    return reading.raw;
  }

  async apply(plan: Plan, current: RawState, signal: AbortSignal): Promise<ApplyReport> {
    signal.throwIfAborted();
    if (plan.operations.length === 0) return { reload: 'none', requests: 0 };
    return this.serialized(() => this.applyNow(plan, current, signal));
  }

  /** Writes now what runtime applies left unpersisted (unless told not to), and stops the timer. */
  async close(options: CloseOptions = {}): Promise<void> {
    if (options.persist !== false) await this.persistence.flush();
    await this.persistence.close();
    await this.io;
  }

  /** Whatever runtime applies have not yet written to the files, written now (tests, shutdown). */
  flush(): Promise<void> {
    return this.persistence.flush();
  }

  /** One writer at a time: applies and persistence read, render and replace the same files. */
  private serialized<T>(job: () => Promise<T>): Promise<T> {
    const run = this.queue.then(job);
    this.queue = run.catch(() => {});
    return run;
  }

  private async applyNow(plan: Plan, current: RawState, signal: AbortSignal): Promise<ApplyReport> {
    signal.throwIfAborted();
    await this.sweepOnce();
    const sentBefore = this.cli.sent;
    const requests = () => this.cli.sent - sentBefore;
    const reading = await this.stillCurrent(current, signal);
    const target = applyOperations(reading.raw, plan.operations, this.deps.owner);

    if (reading.consistent && runtimeOnly(plan.operations, reading.raw)) {
      try {
        await applyAtRuntime(this.session, plan.operations, reading.raw, signal);
        this.advance(reading, target);
        return { reload: 'none', requests: requests() };
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
      const restoreMaps = await this.guard(() => writeMapFiles(this.session, fileState, target.maps));
      try {
        await applyByReload(this.session, reading.text, fileState, text, signal);
      } catch (err) {
        await restoreMaps();
        throw err;
      }
    } finally {
      this.reloadWriting = false;
      this.fileEpoch++;
    }
    return { reload: 'succeeded', requests: requests() };
  }

  /** The runtime apply done: the reading now describes what runs; the files follow soon. */
  private advance(reading: Reading, target: RawState): void {
    const next: Reading = { ...reading, raw: target };
    this.latest = next;
    this.reads.set(target, next);
    this.persistence.schedule();
  }

  private async persistLatest(): Promise<void> {
    const reading = this.latest;
    if (reading) await this.persist(reading);
    await this.io;
  }

  private readonly ours = (text: string): boolean =>
    this.persisting !== undefined && (text === this.persisting.from || text === this.persisting.to);

  /**
   * Renders what `reading` says runs, outside the apply queue (a runtime apply writes no file, and need not
   * wait for thousands of sections to render); the writes then go on in `io`, one persistence at a time.
   * A reload's apply writes files itself: a persistence rendered while one was under way is dropped.
   * Resolves once the writes have started.
   */
  private async persist(reading: Reading): Promise<void> {
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
    const write = w;
    this.io = this.guard(() => writePersist(this.session, this.owned, reading, write))
      .then(
        () => {
          // Applies since advanced `latest` from the same file: it holds the new text now.
          if (this.latest && this.latest.text === from) this.latest.text = to;
        },
        (err) => this.persistFailed(err),
      )
      .finally(() => {
        this.persisting = undefined;
      });
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

  /**
   * The state to apply a plan to: the read the plan was made from when neither the owned file nor HAProxy's
   * workers have changed since, else a new read. A read serves one apply: the next one starts from what
   * that apply left.
   */
  private async stillCurrent(current: RawState, signal: AbortSignal): Promise<Reading> {
    const last = this.reads.get(current);
    this.reads.delete(current);
    if (last && (await unchangedSince(this.session, this.owned, last, signal, this.ours))) return last;
    return takeReading(this.session, this.owned, signal);
  }

  /** The owned file for the part of `target` (the plan applied to what was read) that lives in the file. */
  private render(reading: Reading, plan: Plan, target: RawState): { fileState: RawState; text: string } {
    const inFile = new Set(reading.inFile);
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
