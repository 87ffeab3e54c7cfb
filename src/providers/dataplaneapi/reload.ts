import { setTimeout as sleep } from 'node:timers/promises';
import type { Logger } from 'pino';
import { ReloadFailedError } from '../../model/errors.js';
import { type DataplaneClient, DataplaneUnreachableError } from './client.js';
import { reloadFailedError } from './errors.js';
import type { Counter } from './options.js';

const RELOAD_POLL_MS = 200;
const PID_SETTLE_MS = 5_000;

export interface ReloadOptions {
  timeoutMs: number;
  reloadTimeoutMs: number;
  logger: Logger;
}

/**
 * Reloads as HAProxy saw them: following a `Reload-Id`, telling a reload that took effect (new workers) from
 * one that did not, and repairing the API's view after one that failed by loading the file on disk again.
 */
export class Reloads {
  /**
   * Why the API's view is not what HAProxy runs, when a reload failed or never took effect: the view (and,
   * on HAProxy < 2.7, the file) holds a change HAProxy did not load. Until a reload succeeds the state read
   * is not trusted, so no pass can report the change applied.
   */
  private unloaded: string | undefined;
  /** Whether HAProxy's runtime API has ever answered through the API (it has no socket otherwise). */
  private runtimeAnswered = false;

  constructor(
    private readonly client: DataplaneClient,
    private readonly o: ReloadOptions,
  ) {}

  /** Whether the API's view holds a change HAProxy may not run, until `reloadFromDisk` succeeds. */
  get untrusted(): boolean {
    return this.unloaded !== undefined;
  }

  distrust(why: string): void {
    this.unloaded = why;
  }

  /** Follows a `Reload-Id` until HAProxy has loaded the change or refused it. */
  async follow(id: string | undefined, counter: Counter): Promise<void> {
    if (!id) throw new Error('the Data Plane API asked for a reload without a Reload-Id');
    const deadline = Date.now() + this.o.reloadTimeoutMs;
    for (;;) {
      counter.requests++;
      const { data } = await this.client.GET('/services/haproxy/reloads/{id}', { params: { path: { id } } });
      if (data.status === 'succeeded') return;
      if (data.status === 'failed') {
        // The API restored the last good file but its view keeps the failed change: distrust it until repaired.
        this.unloaded = `reload ${id} failed`;
        throw reloadFailedError(data.response ?? '', id);
      }
      if (Date.now() > deadline) {
        this.unloaded = `reload ${id} did not finish`;
        throw new Error(`reload ${id} had not finished after ${this.o.reloadTimeoutMs} ms`);
      }
      await sleep(RELOAD_POLL_MS);
    }
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
   * unchanged, with `force_reload`): after a failed 3.0 reload that is the last good file, which also puts the
   * API's view back in line; on 2.6 it is the file with the change, which loads once the cause is gone.
   * Throws ReloadFailedError while HAProxy still cannot load it. What was read before no longer tells what
   * is there: the caller forgets it.
   */
  async reloadFromDisk(signal: AbortSignal): Promise<void> {
    const counter = { requests: 0 };
    const raw = await this.client.GET('/services/haproxy/configuration/raw', { signal });
    const { data: version } = await this.client.GET('/services/haproxy/configuration/version', { signal });
    const pidBefore = await this.settledWorkerPid(signal);
    await this.client.POST('/services/haproxy/configuration/raw', {
      params: { query: { version, force_reload: true } },
      body: raw.data,
      timeoutMs: this.o.reloadTimeoutMs + this.o.timeoutMs,
    });
    await this.awaitNewWorkers(pidBefore, counter);
    this.o.logger.info(
      { was: this.unloaded },
      'HAProxy loaded the configuration on disk after a failed reload',
    );
    this.unloaded = undefined;
  }
}
