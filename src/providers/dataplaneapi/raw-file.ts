import { ConcurrentChangeError } from '../../model/errors.js';
import type { Plan } from '../../plan/plan.js';
import type { Capabilities } from './capability.js';
import { type DataplaneClient, versionOf } from './client.js';
import { readState, type Snapshot } from './mapping.js';
import type { ServerUpdate, WritePlan } from './objects.js';
import type { Applied, Counter, DataplaneProviderOptions } from './options.js';
import { editConfigText, RawEditUnsupported, textVersion } from './raw-text.js';
import type { Reloads } from './reload.js';

const DEFAULT_RAW_MIN_WRITES = 8;
/** Runtime actions per push: the API's headers are bounded (1 MiB by default). */
const RUNTIME_ACTIONS_BYTES = 256 * 1024;

type RawFileOptions = Pick<
  DataplaneProviderOptions,
  'timeoutMs' | 'reloadTimeoutMs' | 'rawMinWrites' | 'owner' | 'logger'
> & { capabilities: () => Capabilities };

/**
 * Large plans as one edited configuration file instead of one request per object: the file as the API
 * holds it (cached by version), edited (`raw-text.ts`), pushed with `force_reload`; or, for endpoint moves
 * only, with `skip_reload` and the moves as runtime actions (`SetServerAddr`): no reload.
 */
export class RawFile {
  /** The configuration file as our last push left it, by version. */
  private raw: { version: number; text: string } | undefined;

  constructor(
    private readonly client: DataplaneClient,
    private readonly reloads: Reloads,
    private readonly o: RawFileOptions,
  ) {}

  /** Undefined when the plan is small, or the edit cannot be done by text (then a transaction is used). */
  async apply(
    plan: Plan,
    work: Extract<WritePlan, { kind: 'transaction' }>,
    snapshot: Snapshot,
    signal: AbortSignal,
    counter: Counter,
  ): Promise<Applied | undefined> {
    const min = this.o.rawMinWrites ?? DEFAULT_RAW_MIN_WRITES;
    if (min <= 0 || (!work.moves && work.writes.length < min)) return undefined;
    if (!this.o.capabilities().rawFile) return undefined;
    const text = await this.fileAt(snapshot.version, signal, counter);
    const edited = this.edit(text, snapshot, plan);
    if (edited === undefined) return undefined;
    signal.throwIfAborted();
    if (work.moves) return this.pushMoves(edited, work.moves, snapshot.version, signal, counter);
    return this.pushReload(edited, snapshot.version, signal, counter);
  }

  /**
   * Endpoint moves of servers the configuration does not hold (the slots file's), as runtime actions on a
   * push of the file as it is (`skip_reload`): HAProxy moves them in place, streams and all, without a
   * reload. Undefined when this API version takes no runtime actions.
   */
  async movesOnly(
    moves: ServerUpdate[],
    version: number,
    signal: AbortSignal,
    counter: Counter,
  ): Promise<Applied | undefined> {
    if (!this.o.capabilities().rawFile) return undefined;
    const text = await this.fileAt(version, signal, counter);
    return this.pushMoves(text, moves, version, signal, counter);
  }

  /** The file at `version`: as our last push left it, else read (and refused when it is another version). */
  private async fileAt(version: number, signal: AbortSignal, counter: Counter): Promise<string> {
    if (this.raw?.version === version) return this.raw.text;
    counter.requests++;
    const res = await this.client.GET('/services/haproxy/configuration/raw', { signal });
    const text = String(res.data);
    // The push names this version too, so a file newer than the plan's read cannot be overwritten.
    const inText = textVersion(text);
    if (versionOf(res.headers) !== version || (inText !== undefined && inText !== version))
      throw new ConcurrentChangeError('the configuration changed between the read and the file read');
    return text;
  }

  private edit(text: string, snapshot: Snapshot, plan: Plan): string | undefined {
    try {
      const tags = this.o.capabilities();
      return editConfigText(
        text,
        readState(snapshot, this.o.owner, tags),
        plan.operations,
        this.o.owner,
        tags,
      );
    } catch (err) {
      if (!(err instanceof RawEditUnsupported)) throw err;
      this.o.logger.debug(
        { why: err.message },
        'plan applied as a transaction: the file cannot be edited for it',
      );
      return undefined;
    }
  }

  /** The edited file with `force_reload`, verified by HAProxy's new workers. */
  private async pushReload(
    edited: string,
    version: number,
    signal: AbortSignal,
    counter: Counter,
  ): Promise<Applied> {
    counter.requests++;
    const pidBefore = await this.reloads.settledWorkerPid(signal);
    counter.requests++;
    // Past this point the change is HAProxy's: the push is not cut short by the signal.
    const res = await this.client.POST('/services/haproxy/configuration/raw', {
      params: { query: { version, force_reload: true } },
      body: edited,
      timeoutMs: this.o.reloadTimeoutMs + this.o.timeoutMs,
    });
    this.keepRaw(res.data, res.headers);
    await this.reloads.awaitNewWorkers(pidBefore, counter);
    return { reload: 'succeeded', version: versionOf(res.headers), versionBumps: 1 };
  }

  /** The edited file with `skip_reload`, the moves as runtime actions: HAProxy changes the servers live. */
  private async pushMoves(
    edited: string,
    moves: ServerUpdate[],
    version: number,
    signal: AbortSignal,
    counter: Counter,
  ): Promise<Applied> {
    const chunks = runtimeActionChunks(moves, RUNTIME_ACTIONS_BYTES);
    let current = version;
    let known = true;
    for (const actions of chunks) {
      signal.throwIfAborted();
      counter.requests++;
      try {
        const res = await this.client.POST('/services/haproxy/configuration/raw', {
          params: { query: { version: current, skip_reload: true } },
          body: edited,
          headers: { 'X-Runtime-Actions': actions },
          signal,
        });
        this.keepRaw(res.data, res.headers);
        const next = versionOf(res.headers);
        if (next === undefined) known = false;
        current = next ?? current + 1;
      } catch (err) {
        // The file may hold the moves while HAProxy runs only part of them: it loads the file before
        // anything is trusted again.
        this.reloads.distrust('endpoint moves written to the file may be applied only in part');
        throw err;
      }
    }
    return { reload: 'none', version: known ? current : undefined, versionBumps: chunks.length, moves };
  }

  /** The file as the API stored it after a push of ours, for the next edit at that version. */
  private keepRaw(data: unknown, headers: Record<string, string>): void {
    const text = typeof data === 'string' ? data : undefined;
    const version = versionOf(headers);
    const inText = text === undefined ? undefined : textVersion(text);
    this.raw =
      text !== undefined && version !== undefined && (inText === undefined || inText === version)
        ? { version, text }
        : undefined;
  }
}

/** `SetServerAddr` actions for the moves, `;`-joined into chunks of at most about `maxBytes`. Pure. */
export function runtimeActionChunks(moves: ServerUpdate[], maxBytes: number): string[] {
  const chunks: string[] = [];
  let chunk: string[] = [];
  let bytes = 0;
  for (const m of moves) {
    const action = `SetServerAddr ${m.backend} ${m.server} ${m.body.address} ${m.body.port}`;
    if (bytes + action.length > maxBytes && chunk.length > 0) {
      chunks.push(chunk.join(';'));
      chunk = [];
      bytes = 0;
    }
    chunk.push(action);
    bytes += action.length + 1;
  }
  if (chunk.length > 0) chunks.push(chunk.join(';'));
  return chunks;
}
