import type { Logger } from 'pino';
import type { Owner, RawState } from '../../haproxy/model.js';
import { applyOperations } from '../../plan/apply.js';
import type { Plan } from '../../plan/plan.js';
import { removeTemporaries } from '../../store/atomic-file.js';
import {
  type ApplyReport,
  errorText,
  type Provider,
  type ProviderInfo,
  type ProviderTraffic,
  TerminalError,
} from '../provider.js';
import type { StockHaproxyConfig } from './config.js';
import { MasterCli } from './master-cli.js';
import { defaultsNameFor, renderOwnedFile, UnsafeValueError } from './owned-file.js';
import { OwnedFileCache, type Reading, takeReading, unchangedSince } from './read.js';
import { applyByReload } from './reload.js';
import { applyAtRuntime, runtimeOnly } from './runtime.js';
import { readCommand, type Session } from './session.js';

export interface StockHaproxyDeps {
  logger: Logger;
  /** Whose tags the objects written carry; its id also names the owned file's `defaults`. */
  owner: Owner;
  /** Counts every master-CLI command and the owned file's bytes when written (the provider metrics). */
  traffic?: ProviderTraffic;
}

/**
 * The provider for a stock HAProxy (`KUBEBYON_PROVIDER=haproxy`): the service owns one configuration file
 * that HAProxy loads as its last `-f`, and talks to HAProxy through the master CLI only.
 *
 * - read (`read.ts`): the owned file gives the structure (frontend, rules, backends, tags); the current
 *   worker's `show stat` and `show servers state` give what runs (servers as the runtime API left them, and
 *   the foreign proxies, untagged). The owned frontend's `id` is a hash of the file's structure, so a file
 *   that HAProxy has not loaded is noticed and reloaded rather than trusted.
 * - apply, servers only (`runtime.ts`): the file is rewritten first (no reload), then runtime commands on
 *   the current worker; a command that fails undoes the earlier ones and the apply falls back to a reload.
 * - apply, anything else (`reload.ts`): render the file, `haproxy -c` it with the operator's files, put it
 *   in place atomically, `reload` through the master, and confirm that the new worker runs the new
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
  private readonly defaultsName: string;
  private queue: Promise<unknown> = Promise.resolve();
  private swept = false;

  constructor(
    private readonly config: StockHaproxyConfig,
    private readonly deps: StockHaproxyDeps,
  ) {
    this.cli = new MasterCli(config.masterSocket, undefined, deps.traffic);
    this.session = { config, cli: this.cli, logger: deps.logger, traffic: deps.traffic };
    this.defaultsName = defaultsNameFor(deps.owner.id);
    this.owned = new OwnedFileCache(config.ownedFile, this.defaultsName);
  }

  async ping(signal: AbortSignal): Promise<ProviderInfo> {
    const answer = (await readCommand(this.session, 'show version', signal)).trim();
    if (!/^[0-9]+\.[0-9]+/.test(answer))
      throw new Error(`unexpected answer to show version: ${answer.slice(0, 100)}`);
    return { version: `HAProxy ${answer.split('\n')[0]}`, endpoint: this.config.masterSocket };
  }

  async readState(signal: AbortSignal): Promise<RawState> {
    const reading = await takeReading(this.session, this.owned, signal);
    this.reads.set(reading.raw, reading);
    return reading.raw;
  }

  async apply(plan: Plan, current: RawState, signal: AbortSignal): Promise<ApplyReport> {
    signal.throwIfAborted();
    if (plan.operations.length === 0) return { reload: 'none', requests: 0 };
    // One apply at a time: each reads, renders and replaces the one file.
    const run = this.queue.then(() => this.applyNow(plan, current, signal));
    this.queue = run.catch(() => {});
    return run;
  }

  private async applyNow(plan: Plan, current: RawState, signal: AbortSignal): Promise<ApplyReport> {
    signal.throwIfAborted();
    await this.sweepOnce();
    const sentBefore = this.cli.sent;
    const requests = () => this.cli.sent - sentBefore;
    const reading = await this.stillCurrent(current, signal);
    const { fileState, text } = this.render(reading, plan);

    if (reading.consistent && runtimeOnly(plan.operations, reading.raw)) {
      try {
        await applyAtRuntime(this.session, plan.operations, reading.raw, text, signal);
        return { reload: 'none', requests: requests() };
      } catch (err) {
        if (signal.aborted) throw err;
        this.deps.logger.warn(
          { err: errorText(err) },
          'runtime change failed; applying it with a reload instead',
        );
      }
    }
    await applyByReload(this.session, reading.text, fileState, text, signal);
    return { reload: 'succeeded', requests: requests() };
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
    if (last && (await unchangedSince(this.session, this.owned, last, signal))) return last;
    return takeReading(this.session, this.owned, signal);
  }

  /** The plan applied to what was read, and the owned file for the part of it that lives in the file. */
  private render(reading: Reading, plan: Plan): { fileState: RawState; text: string } {
    const target = applyOperations(reading.raw, plan.operations, this.deps.owner);
    const inFile = new Set(reading.inFile);
    for (const op of plan.operations) {
      if (op.kind === 'create_frontend') inFile.add(op.frontend.name);
      if (op.kind === 'create_backend') inFile.add(op.backend.name);
    }
    const fileState: RawState = {
      frontends: target.frontends.filter((f) => inFile.has(f.name)),
      backends: target.backends.filter((b) => inFile.has(b.name)),
    };
    try {
      return { fileState, text: renderOwnedFile(fileState, this.defaultsName) };
    } catch (err) {
      if (err instanceof UnsafeValueError) throw new TerminalError(err.message);
      throw err;
    }
  }
}
