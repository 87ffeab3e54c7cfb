import { setTimeout as sleep } from 'node:timers/promises';
import type { Logger } from 'pino';
import { ReloadFailedError } from '../../model/errors.js';
import { type DataplaneClient, DataplaneUnreachableError, versionOf } from './client.js';

const RELOAD_POLL_MS = 200;
const PID_SETTLE_MS = 5_000;
/** A start time read off `uptime` moves by a second or so between reads; more means another process. */
const START_SLACK_S = 3;

export interface ReloadOptions {
  timeoutMs: number;
  reloadTimeoutMs: number;
  logger: Logger;
}

/** The requests one apply has sent so far, for its report. */
export interface Counter {
  requests: number;
}

/**
 * HAProxy's worker as the API's runtime side shows it, and reloads as HAProxy saw them: which process runs
 * (a reload or restart by anyone starts another), whether it takes servers at runtime, telling a reload
 * that took effect (new workers) from one that did not, and loading the file on disk again after one that
 * failed.
 */
export class Workers {
  private process: { pid: number; start: number; generation: number } | undefined;
  /**
   * Whether the API can drive runtime servers on this HAProxy: seen working on 3.0; on 2.6 the API adds one
   * (201) but then answers 404 `no data for <backend>/<server>` to every GET, PUT and DELETE of it, so it
   * could never be enabled. Unknown until the first read of the worker.
   */
  runtimeServers: boolean | undefined;
  /**
   * Why the file on disk may not be what HAProxy runs, after a reload that failed or never took effect: on
   * HAProxy < 2.7 the API reloads by a signal and keeps the file HAProxy refused. Until a reload succeeds the
   * file is not trusted, so no pass can report the change applied.
   */
  private unloaded: string | undefined;
  /** Whether HAProxy's runtime API has ever answered through the API (it has no socket otherwise). */
  private runtimeAnswered = false;

  constructor(
    private readonly client: DataplaneClient,
    private readonly o: ReloadOptions,
  ) {}

  /**
   * HAProxy's worker pid, a token that changes whenever another process runs (reload or restart), and the
   * configuration's version from the answer's `Configuration-Version` header (v3.0.23, v3.2.15 and v3.4.0 send
   * it on every answer; undefined if absent).
   */
  async current(
    signal: AbortSignal,
    counter: Counter,
  ): Promise<{ pid: number; generation: string; version: number | undefined }> {
    counter.requests++;
    const res = await this.client.GET('/services/haproxy/runtime/info', { signal });
    const info = (Array.isArray(res.data) ? res.data[0] : res.data)?.info;
    const pid = info?.pid ?? 0;
    const major = /^(\d+)\.\d+/.exec(String(info?.version ?? ''))?.[1];
    if (major !== undefined) this.runtimeServers = Number(major) >= 3;
    const start = Math.floor(Date.now() / 1000) - (info?.uptime ?? 0);
    const p = this.process;
    // The same pid in a restarted container is another process: its start time tells.
    if (!p || p.pid !== pid || Math.abs(p.start - start) > START_SLACK_S)
      this.process = { pid, start, generation: (p?.generation ?? 0) + 1 };
    const now = this.process as NonNullable<typeof this.process>;
    return { pid, generation: `${pid}.${now.generation}`, version: versionOf(res.headers) };
  }

  /** The token `current` gave last, without a request (undefined before the first). */
  get lastGeneration(): string | undefined {
    return this.process && `${this.process.pid}.${this.process.generation}`;
  }

  /** Whether the file on disk may hold a change HAProxy does not run, until `reloadFromDisk` succeeds. */
  get untrusted(): boolean {
    return this.unloaded !== undefined;
  }

  distrust(why: string): void {
    this.unloaded = why;
  }

  /**
   * The pid of HAProxy's worker, which changes with every reload; undefined when the runtime API does not
   * answer (it does not while a reload swaps workers, nor without a runtime socket: then nothing is verified).
   */
  private async workerPid(signal?: AbortSignal): Promise<number | undefined> {
    try {
      const { data } = await this.client.GET('/services/haproxy/runtime/info', signal ? { signal } : {});
      if (typeof data.info?.pid !== 'number') return undefined;
      this.runtimeAnswered = true;
      return data.info.pid;
    } catch (err) {
      if (err instanceof DataplaneUnreachableError || signal?.aborted) throw err;
      return undefined;
    }
  }

  /**
   * The worker pid before a reload. Right after an earlier reload the runtime API may not answer for a moment
   * (workers are being swapped): asked again for a few seconds, since without it a reload HAProxy refuses
   * (2.6 reloads by signal) could not be told from one it made.
   */
  async settledWorkerPid(signal: AbortSignal): Promise<number | undefined> {
    const deadline = Date.now() + PID_SETTLE_MS;
    for (;;) {
      const pid = await this.workerPid(signal);
      // Without a runtime API at all (it never answered) there is nothing to wait for.
      if (pid !== undefined || !this.runtimeAnswered || Date.now() > deadline) return pid;
      await sleep(RELOAD_POLL_MS / 2);
    }
  }

  /**
   * A reload that the API reports done has taken effect once HAProxy runs new workers. With HAProxy >= 2.7 the
   * API reloads through the master socket and knows; with a reload command that only signals HAProxy (2.6)
   * it does not, and a reload that fails (a port held by another process) would pass for a success.
   */
  async awaitNewWorkers(before: number | undefined, counter: Counter): Promise<void> {
    if (before === undefined) return;
    const deadline = Date.now() + this.o.reloadTimeoutMs;
    for (;;) {
      counter.requests++;
      const now = await this.workerPid();
      if (now !== undefined && now !== before) return;
      if (Date.now() > deadline) {
        this.unloaded = 'HAProxy did not start new workers after a reload';
        throw new ReloadFailedError(
          `HAProxy did not load the change within ${this.o.reloadTimeoutMs} ms and keeps running its previous configuration: the Data Plane API reported the reload done, but no new HAProxy worker started (with a reload command that only signals HAProxy, as on HAProxy 2.6, the API cannot see why; HAProxy's own log says)`,
        );
      }
      await sleep(RELOAD_POLL_MS);
    }
  }

  /**
   * After a reload that failed or never took effect, asks the API to load the file on disk again (pushed back
   * unchanged, with `force_reload`): after a failed 3.0 reload that is the last good file; on 2.6 it is the
   * file with the change, which loads once the cause is gone. Throws ReloadFailedError while HAProxy still
   * cannot load it. Resolves the configuration version it left.
   */
  async reloadFromDisk(signal: AbortSignal): Promise<number | undefined> {
    const counter = { requests: 0 };
    const raw = await this.client.GET('/services/haproxy/configuration/raw', { signal, text: true });
    const version = versionOf(raw.headers);
    const pidBefore = await this.settledWorkerPid(signal);
    const pushed = await this.client.POST('/services/haproxy/configuration/raw', {
      params: { query: { ...(version !== undefined ? { version } : {}), force_reload: true } },
      body: String(raw.data),
      timeoutMs: this.o.reloadTimeoutMs + this.o.timeoutMs,
    });
    await this.awaitNewWorkers(pidBefore, counter);
    this.o.logger.info(
      { was: this.unloaded },
      'HAProxy loaded the configuration on disk after a failed reload',
    );
    this.unloaded = undefined;
    return versionOf(pushed.headers);
  }
}
