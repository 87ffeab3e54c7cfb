import type { Logger } from 'pino';
import type { Owner, RawState } from '../../haproxy/model.js';
import type { Plan } from '../../plan/plan.js';
import {
  type ApplyReport,
  ConcurrentChangeError,
  type Provider,
  type ProviderInfo,
  type ProviderTraffic,
  ReloadFailedError,
  TerminalError,
} from '../provider.js';
import { missingCapabilities } from './capability.js';
import {
  createClient,
  type DataplaneClient,
  DataplaneHttpError,
  DataplaneUnreachableError,
  versionOf,
} from './client.js';
import { TransactionLedger } from './ledger.js';
import { readState, type Snapshot } from './mapping.js';
import { editConfigText, RawEditUnsupported, textVersion } from './raw-text.js';
import { planWrites, type ServerUpdate, snapshotAfter, type Write, type WritePlan } from './writes.js';

export interface DataplaneProviderOptions {
  /** The API's root, e.g. `http://127.0.0.1:5555` (`/v3` is added). */
  url: string;
  username: string;
  password: string;
  /** Longest one request may take. */
  timeoutMs: number;
  /** Longest a reload may take (a `force_reload` commit, or following a `Reload-Id`). */
  reloadTimeoutMs: number;
  /** Most server address/port changes applied one by one without a reload; more go into one transaction. */
  runtimeMaxServers: number;
  /**
   * Plans that need at least this many writes in a transaction are applied as one edited configuration file
   * instead (`POST /configuration/raw`); more endpoint moves than `runtimeMaxServers` likewise, without a
   * reload (`skip_reload` with the moves as runtime actions). 0 turns the file path off. Default 8.
   */
  rawMinWrites?: number;
  /**
   * `force_reload` (default): the commit reloads HAProxy before it answers, and a failed reload answers 400
   * with the API's view restored. `follow`: commit into the API's reload batching and follow the `Reload-Id`.
   */
  commit?: 'force_reload' | 'follow';
  /**
   * After each apply, open the next transaction ahead at the version it left (default true): opening one
   * costs what a parse of the whole file costs, off the path of the next change. One stays open while idle.
   */
  prepareTransactions?: boolean;
  /** Where the ids of open transactions are kept across a crash; in memory only when absent. */
  ledgerFile?: string;
  /** Whose tags what is written carries (the registry's owner). */
  owner: Owner;
  logger: Logger;
  /** Counts every request and its bytes (the service's provider metrics). */
  traffic?: ProviderTraffic;
}

/** The API lacks something this service needs (e.g. `metadata`, v3.2+): retrying cannot help. */
export class MissingCapabilityError extends TerminalError {
  override name = 'MissingCapabilityError';
}

/** More transactions are open than the API allows (429): transient, retried with backoff. */
export class TooManyTransactionsError extends Error {
  override readonly name = 'TooManyTransactionsError';
}

const RELOAD_POLL_MS = 200;
const PID_SETTLE_MS = 5_000;

/** How an apply ended, and the configuration version it left (when the API said) after how many writes. */
interface Applied {
  reload: ApplyReport['reload'];
  version: number | undefined;
  writes: number;
  /** Endpoint moves applied at runtime and written to the file (no reload). */
  moves?: ServerUpdate[];
}

const DEFAULT_RAW_MIN_WRITES = 8;
/** Runtime actions per push: the API's headers are bounded (1 MiB by default). */
const RUNTIME_ACTIONS_BYTES = 256 * 1024;
const CLEANUP_TIMEOUT_MS = 10_000;
const READ_ATTEMPTS = 3;

/** HAProxy's own words from a reload's output: its ALERT lines, else its last lines. */
export function haproxyMessage(output: string): string {
  const lines = output
    .split(/\\n|\n/)
    .map((l) => l.trim())
    .filter(Boolean);
  const alerts = lines
    .filter((l) => l.includes('[ALERT]'))
    .map((l) => l.replace(/^.*?\[ALERT\]\s*(\(\d+\)\s*)?:\s*/, ''));
  const picked = alerts.length > 0 ? alerts : lines.slice(-3);
  return picked.join('; ').slice(0, 2000);
}

/**
 * The default provider: HAProxy's Data Plane API v3 (metadata needs v3.2+). Reads are two `full_section`
 * lists (frontends, backends), skipped while the configuration version has not moved; a plan is applied as
 * one transaction committed with one reload, or, when it only moves server endpoints, through the runtime
 * path without a reload. See `writes.ts` for how operations become requests.
 */
export class DataplaneProvider implements Provider {
  readonly name = 'dataplaneapi';
  private readonly client: DataplaneClient;
  private readonly ledger: TransactionLedger;
  private snapshot: Snapshot | undefined;
  private state: RawState | undefined;
  /** The API's objects behind each state handed out, for the apply handed that state back. */
  private readonly reads = new WeakMap<RawState, Snapshot>();
  private capable = false;
  private leftoversDropped = false;
  /**
   * Why the API's view is not what HAProxy runs, when a reload failed or never took effect: the view (and,
   * on HAProxy < 2.7, the file) holds a change HAProxy did not load. Until a reload succeeds the state read
   * is not trusted, so no pass can report the change applied.
   */
  private unloaded: string | undefined;
  private apiVersion: string | undefined;
  /** The configuration file as our last push left it, by version. */
  private raw: { version: number; text: string } | undefined;
  /** The transaction opened ahead of the next change, with the version it was opened at. */
  private prepared: Promise<{ id: string; version: number } | undefined> | undefined;
  private closed = false;
  /** Whether HAProxy's runtime API has ever answered through the API (it has no socket otherwise). */
  private runtimeAnswered = false;

  constructor(private readonly o: DataplaneProviderOptions) {
    this.client = createClient({
      url: o.url,
      username: o.username,
      password: o.password,
      timeoutMs: o.timeoutMs,
      ...(o.traffic
        ? {
            onRequest: () => o.traffic?.request(),
            onBytes: (direction: 'sent' | 'received', n: number) => o.traffic?.bytes(direction, n),
          }
        : {}),
    });
    this.ledger = new TransactionLedger(o.ledgerFile, this.client.url);
  }

  /**
   * Checks the API once it answers: capabilities, transactions a crashed run left open, and (not for a
   * readiness probe, which must not reload HAProxy) a view left untrusted by a failed reload.
   */
  async ready(signal: AbortSignal, repair = true): Promise<void> {
    try {
      if (!this.capable) {
        const spec = await this.client.GET('/specification_openapiv3', { signal });
        const missing = missingCapabilities(spec.data);
        if (missing.length > 0) {
          throw new MissingCapabilityError(
            `the Data Plane API at ${this.client.url} lacks what this service needs: ${missing.join('; ')}`,
          );
        }
        this.capable = true;
      }
      if (!this.leftoversDropped) {
        for (const id of await this.ledger.leftovers())
          await this.dropTransaction(id, 'left open by an earlier run');
        this.leftoversDropped = true;
      }
      if (repair && this.unloaded !== undefined) await this.reloadFromDisk(signal);
    } catch (err) {
      throw this.translate(err);
    }
  }

  async ping(signal: AbortSignal): Promise<ProviderInfo> {
    await this.ready(signal, false);
    try {
      await this.client.GET('/services/haproxy/configuration/version', { signal });
      if (this.apiVersion === undefined) {
        const info = await this.client.GET('/info', { signal });
        this.apiVersion = info.data.api?.version ?? 'unknown';
      }
      const health = await this.client.GET('/health', { signal });
      if (health.data.haproxy === 'down')
        throw new Error(`the Data Plane API at ${this.client.url} answers, but reports HAProxy down`);
    } catch (err) {
      throw this.translate(err);
    }
    return { version: `Data Plane API ${this.apiVersion}`, endpoint: this.client.url };
  }

  async readState(signal: AbortSignal): Promise<RawState> {
    await this.ready(signal);
    try {
      const snapshot = await this.read(signal);
      const raw = structuredClone(this.state ?? readState(snapshot, this.o.owner));
      this.reads.set(raw, snapshot);
      return raw;
    } catch (err) {
      throw this.translate(err);
    }
  }

  /** The configuration as of now: the cached read while the version has not moved, else the two lists. */
  private async read(signal: AbortSignal): Promise<Snapshot> {
    for (let attempt = 1; ; attempt++) {
      const { data: version } = await this.client.GET('/services/haproxy/configuration/version', { signal });
      if (this.snapshot && this.snapshot.version === version) return this.snapshot;
      const query = { query: { full_section: true } };
      const [frontends, backends] = await Promise.all([
        this.client.GET('/services/haproxy/configuration/frontends', { params: query, signal }),
        this.client.GET('/services/haproxy/configuration/backends', { params: query, signal }),
      ]);
      const vf = versionOf(frontends.headers);
      const vb = versionOf(backends.headers);
      // Both lists must come from one version, or the state read would be a mix of two configurations.
      if (vf !== undefined && vf === vb) {
        this.snapshot = { version: vf, frontends: frontends.data, backends: backends.data };
        this.state = readState(this.snapshot, this.o.owner);
        return this.snapshot;
      }
      if (attempt >= READ_ATTEMPTS)
        throw new ConcurrentChangeError('the configuration kept changing while it was read');
    }
  }

  async apply(plan: Plan, current: RawState, signal: AbortSignal): Promise<ApplyReport> {
    signal.throwIfAborted();
    if (plan.operations.length === 0) return { reload: 'none', requests: 0 };
    await this.ready(signal);
    const counter = { requests: 0 };
    let after: Snapshot | undefined;
    try {
      // The objects the plan was made from; a state this provider did not hand out is read again. A
      // snapshot older than the API's version makes the writes fail on it and the pass plan again.
      const snapshot = this.reads.get(current) ?? (await this.read(signal));
      const work = planWrites(plan, snapshot, {
        runtimeMaxServers: this.o.runtimeMaxServers,
        owner: this.o.owner,
      });
      signal.throwIfAborted();
      if (work.kind === 'none') return { reload: 'none', requests: 0 };
      const done =
        work.kind === 'runtime'
          ? await this.applyRuntime(work.updates, snapshot.version, signal, counter)
          : ((await this.applyAsFile(plan, work, snapshot, signal, counter)) ??
            (await this.applyTransaction(work.writes, snapshot.version, signal, counter)));
      // The version moved by our own writes alone: the API now holds the snapshot with them applied.
      if (done.version === snapshot.version + done.writes) {
        this.prepare(done.version);
        const applied =
          work.kind === 'transaction' && done.moves
            ? { kind: 'runtime' as const, updates: done.moves }
            : work;
        after = snapshotAfter(snapshot, applied, done.version);
      }
      return { reload: done.reload, requests: counter.requests };
    } catch (err) {
      throw this.translate(err);
    } finally {
      // Otherwise what was read before no longer tells what is there.
      this.snapshot = after;
      this.state = after ? readState(after, this.o.owner) : undefined;
    }
  }

  /** Server address/port changes, each applied by the API through HAProxy's runtime API: no reload. */
  private async applyRuntime(
    updates: ServerUpdate[],
    version: number,
    signal: AbortSignal,
    counter: { requests: number },
  ): Promise<Applied> {
    let reloaded = false;
    let current = version;
    // Known only while every answer says which version it left.
    let known = true;
    for (const u of updates) {
      signal.throwIfAborted();
      counter.requests++;
      const res = await this.client.PUT(
        '/services/haproxy/configuration/backends/{parent_name}/servers/{name}',
        {
          params: { path: { parent_name: u.backend, name: u.server }, query: { version: current } },
          body: u.body,
          signal,
        },
      );
      const next = versionOf(res.headers);
      if (next === undefined) known = false;
      current = next ?? current + 1;
      if (res.status === 202) {
        // The API could not apply it at runtime and asked for a reload.
        reloaded = true;
        await this.followReload(res.headers['reload-id'], counter);
      }
    }
    return {
      reload: reloaded ? 'succeeded' : 'none',
      version: known ? current : undefined,
      writes: updates.length,
    };
  }

  private async applyTransaction(
    writes: Write[],
    version: number,
    signal: AbortSignal,
    counter: { requests: number },
  ): Promise<Applied> {
    let id = await this.takePrepared(version);
    const ahead = id !== undefined;
    if (id === undefined) {
      counter.requests++;
      const opened = await this.client.POST('/services/haproxy/transactions', {
        params: { query: { version } },
        signal,
      });
      id = opened.data.id;
      if (!id) throw new Error('the Data Plane API opened a transaction without an id');
    }
    let open = true;
    try {
      if (!ahead) await this.ledger.add(id);
      counter.requests++;
      const pidBefore = await this.settledWorkerPid(signal);
      for (const w of writes) {
        signal.throwIfAborted();
        counter.requests++;
        await this.write(w, id, signal);
      }
      signal.throwIfAborted();
      counter.requests++;
      // Past this point the change is HAProxy's: the commit is not cut short by the signal.
      const force = (this.o.commit ?? 'force_reload') === 'force_reload';
      const committed = await this.client.PUT('/services/haproxy/transactions/{id}', {
        params: { path: { id }, query: force ? { force_reload: true } : {} },
        timeoutMs: this.o.reloadTimeoutMs + this.o.timeoutMs,
      });
      open = false;
      await this.ledger.remove(id);
      if (committed.status === 202) await this.followReload(committed.headers['reload-id'], counter);
      await this.awaitNewWorkers(pidBefore, counter);
      return { reload: 'succeeded', version: versionOf(committed.headers), writes: 1 };
    } finally {
      if (open) await this.dropTransaction(id, 'the apply did not complete');
    }
  }

  /**
   * Large plans as one edited configuration file instead of one request per object: the file as the API
   * holds it (cached by version), edited (`raw-text.ts`), pushed with `force_reload`; or, for endpoint moves
   * only, with `skip_reload` and the moves as runtime actions (`SetServerAddr`): no reload. Undefined when
   * the plan is small, or the edit cannot be done by text (then a transaction is used).
   */
  private async applyAsFile(
    plan: Plan,
    work: Extract<WritePlan, { kind: 'transaction' }>,
    snapshot: Snapshot,
    signal: AbortSignal,
    counter: { requests: number },
  ): Promise<Applied | undefined> {
    const min = this.o.rawMinWrites ?? DEFAULT_RAW_MIN_WRITES;
    if (min <= 0 || (!work.moves && work.writes.length < min)) return undefined;
    let text: string;
    if (this.raw?.version === snapshot.version) text = this.raw.text;
    else {
      counter.requests++;
      const res = await this.client.GET('/services/haproxy/configuration/raw', { signal });
      text = String(res.data);
      // The push names this version too, so a file newer than the plan's read cannot be overwritten.
      const inText = textVersion(text);
      if (
        versionOf(res.headers) !== snapshot.version ||
        (inText !== undefined && inText !== snapshot.version)
      )
        throw new ConcurrentChangeError('the configuration changed between the read and the file read');
    }
    let edited: string;
    try {
      edited = editConfigText(text, readState(snapshot, this.o.owner), plan.operations, this.o.owner);
    } catch (err) {
      if (!(err instanceof RawEditUnsupported)) throw err;
      this.o.logger.debug(
        { why: err.message },
        'plan applied as a transaction: the file cannot be edited for it',
      );
      return undefined;
    }
    signal.throwIfAborted();
    if (work.moves) return this.pushMoves(edited, work.moves, snapshot.version, signal, counter);
    counter.requests++;
    const pidBefore = await this.settledWorkerPid(signal);
    counter.requests++;
    // Past this point the change is HAProxy's: the push is not cut short by the signal.
    const res = await this.client.POST('/services/haproxy/configuration/raw', {
      params: { query: { version: snapshot.version, force_reload: true } },
      body: edited,
      timeoutMs: this.o.reloadTimeoutMs + this.o.timeoutMs,
    });
    this.keepRaw(res.data, res.headers);
    await this.awaitNewWorkers(pidBefore, counter);
    return { reload: 'succeeded', version: versionOf(res.headers), writes: 1 };
  }

  /** The edited file with `skip_reload`, the moves as runtime actions: HAProxy changes the servers live. */
  private async pushMoves(
    edited: string,
    moves: ServerUpdate[],
    version: number,
    signal: AbortSignal,
    counter: { requests: number },
  ): Promise<Applied> {
    const chunks: string[] = [];
    let chunk: string[] = [];
    let bytes = 0;
    for (const m of moves) {
      const action = `SetServerAddr ${m.backend} ${m.server} ${m.body.address} ${m.body.port}`;
      if (bytes + action.length > RUNTIME_ACTIONS_BYTES && chunk.length > 0) {
        chunks.push(chunk.join(';'));
        chunk = [];
        bytes = 0;
      }
      chunk.push(action);
      bytes += action.length + 1;
    }
    if (chunk.length > 0) chunks.push(chunk.join(';'));
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
        this.unloaded = 'endpoint moves written to the file may be applied only in part';
        throw err;
      }
    }
    return { reload: 'none', version: known ? current : undefined, writes: chunks.length, moves };
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

  private prepare(version: number): void {
    if (this.o.prepareTransactions === false || this.closed) return;
    const earlier = this.prepared;
    this.prepared = (async () => {
      const stale = await earlier;
      if (stale) await this.dropTransaction(stale.id, 'opened ahead at a version that has moved');
      try {
        const opened = await this.client.POST('/services/haproxy/transactions', {
          params: { query: { version } },
          signal: AbortSignal.timeout(this.o.timeoutMs),
        });
        const id = opened.data.id;
        if (!id) return undefined;
        await this.ledger.add(id);
        return { id, version };
      } catch (err) {
        this.o.logger.debug({ err: String(err) }, 'could not open a transaction ahead');
        return undefined;
      }
    })();
  }

  /** The transaction opened ahead, if it was opened at `version`; one opened at another is dropped. */
  private async takePrepared(version: number): Promise<string | undefined> {
    const ahead = await this.prepared;
    this.prepared = undefined;
    if (!ahead) return undefined;
    if (ahead.version === version) return ahead.id;
    await this.dropTransaction(ahead.id, 'opened ahead at a version that has moved');
    return undefined;
  }

  private async write(w: Write, transaction_id: string, signal: AbortSignal): Promise<void> {
    const c = this.client;
    const tx = { transaction_id };
    switch (w.kind) {
      case 'create_backend':
        await c.POST('/services/haproxy/configuration/backends', {
          params: { query: { ...tx, full_section: true } },
          body: w.body,
          signal,
        });
        return;
      case 'replace_backend':
        await c.PUT('/services/haproxy/configuration/backends/{name}', {
          params: { path: { name: w.name }, query: { ...tx, full_section: true } },
          body: w.body,
          signal,
        });
        return;
      case 'delete_backend':
        await c.DELETE('/services/haproxy/configuration/backends/{name}', {
          params: { path: { name: w.name }, query: tx },
          signal,
        });
        return;
      case 'create_frontend':
        await c.POST('/services/haproxy/configuration/frontends', {
          params: { query: { ...tx, full_section: true } },
          body: w.body,
          signal,
        });
        return;
      case 'replace_frontend':
        await c.PUT('/services/haproxy/configuration/frontends/{name}', {
          params: { path: { name: w.name }, query: { ...tx, full_section: true } },
          body: w.body,
          signal,
        });
        return;
      case 'replace_rules':
        await c.PUT('/services/haproxy/configuration/frontends/{parent_name}/backend_switching_rules', {
          params: { path: { parent_name: w.frontend }, query: tx },
          body: w.body,
          signal,
        });
        return;
      case 'delete_frontend':
        await c.DELETE('/services/haproxy/configuration/frontends/{name}', {
          params: { path: { name: w.name }, query: tx },
          signal,
        });
        return;
    }
  }

  /** Follows a `Reload-Id` until HAProxy has loaded the change or refused it. */
  private async followReload(id: string | undefined, counter: { requests: number }): Promise<void> {
    if (!id) throw new Error('the Data Plane API asked for a reload without a Reload-Id');
    const deadline = Date.now() + this.o.reloadTimeoutMs;
    for (;;) {
      counter.requests++;
      const { data } = await this.client.GET('/services/haproxy/reloads/{id}', { params: { path: { id } } });
      if (data.status === 'succeeded') return;
      if (data.status === 'failed') {
        // The API restored the last good file but its view keeps the failed change: distrust it until repaired.
        this.unloaded = `reload ${id} failed`;
        throw new ReloadFailedError(
          `HAProxy could not load the change and keeps running its previous configuration (reload ${id}): ${haproxyMessage(data.response ?? '')}`,
        );
      }
      if (Date.now() > deadline) {
        this.unloaded = `reload ${id} did not finish`;
        throw new Error(`reload ${id} had not finished after ${this.o.reloadTimeoutMs} ms`);
      }
      await new Promise((r) => setTimeout(r, RELOAD_POLL_MS));
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
  private async settledWorkerPid(signal: AbortSignal): Promise<number | undefined> {
    const deadline = Date.now() + PID_SETTLE_MS;
    for (;;) {
      const pid = await this.workerPid(signal);
      // Without a runtime API at all (it never answered) there is nothing to wait for.
      if (pid !== undefined || !this.runtimeAnswered || Date.now() > deadline) return pid;
      await new Promise((r) => setTimeout(r, RELOAD_POLL_MS / 2));
    }
  }

  /**
   * A reload that the API reports done has taken effect once HAProxy runs new workers. With HAProxy >= 2.7 the
   * API reloads through the master socket and knows; with a reload command that only signals HAProxy (2.6)
   * it does not, and a reload that fails (a port held by another process) would pass for a success.
   */
  private async awaitNewWorkers(before: number | undefined, counter: { requests: number }): Promise<void> {
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
      await new Promise((r) => setTimeout(r, RELOAD_POLL_MS));
    }
  }

  /**
   * After a reload that failed or never took effect, asks the API to load the file on disk again (pushed back
   * unchanged, with `force_reload`): after a failed 3.0 reload that is the last good file, which also puts the
   * API's view back in line; on 2.6 it is the file with the change, which loads once the cause is gone.
   * Throws ReloadFailedError while HAProxy still cannot load it.
   */
  private async reloadFromDisk(signal: AbortSignal): Promise<void> {
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
    this.snapshot = undefined;
    this.state = undefined;
  }

  private async dropTransaction(id: string, why: string): Promise<void> {
    try {
      await this.client.DELETE('/services/haproxy/transactions/{id}', {
        params: { path: { id } },
        signal: AbortSignal.timeout(CLEANUP_TIMEOUT_MS),
      });
      await this.ledger.remove(id);
      this.o.logger.info({ transaction: id, why }, 'dropped our open transaction');
    } catch (err) {
      if (err instanceof DataplaneHttpError && err.status === 404) {
        await this.ledger.remove(id);
        return;
      }
      // Kept in the ledger: the next start tries again.
      this.o.logger.warn({ transaction: id, err: String(err) }, 'could not drop our open transaction');
    }
  }

  /** API answers as the loop's error kinds: terminal, concurrent change, or transient. */
  private translate(err: unknown): unknown {
    if (!(err instanceof DataplaneHttpError)) return err;
    const url = this.client.url;
    switch (err.status) {
      case 401:
      case 403:
        return new TerminalError(
          `the Data Plane API at ${url} refused the credentials (${err.status} ${err.apiMessage}): check KUBEBYON_DATAPLANE_USERNAME and KUBEBYON_DATAPLANE_PASSWORD`,
        );
      case 404:
      case 406:
      case 409:
        return new ConcurrentChangeError(`the configuration changed meanwhile: ${err.message}`);
      case 429:
        return new TooManyTransactionsError(
          `the Data Plane API has too many open transactions (429): ${err.apiMessage}; retrying with backoff`,
        );
      case 400:
        if (/reload failed/i.test(err.apiMessage)) {
          // Seen on v3.4.0: after a failed `force_reload` commit that changed an existing frontend, the API's
          // view kept the change (the shared notes saw it restored for a new one): distrust it either way.
          this.unloaded = 'a force_reload commit failed';
          return new ReloadFailedError(
            `HAProxy could not load the change and keeps running its previous configuration: ${haproxyMessage(err.apiMessage)}`,
          );
        }
        if (/validation error/i.test(err.apiMessage)) {
          return new TerminalError(`HAProxy refused the configuration: ${haproxyMessage(err.apiMessage)}`);
        }
        return new TerminalError(`the Data Plane API refused a request: ${err.message}`);
      default:
        return err.status >= 500 ? new Error(err.message) : new TerminalError(err.message);
    }
  }

  async close(): Promise<void> {
    this.closed = true;
    const ahead = await this.prepared;
    this.prepared = undefined;
    if (ahead) await this.dropTransaction(ahead.id, 'shutting down');
    this.client.close();
  }
}

export { DataplaneUnreachableError };
