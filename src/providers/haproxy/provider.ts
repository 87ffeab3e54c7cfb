import { execFile } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import type { Logger } from 'pino';
import { alertsIn } from '../../haproxy/alerts.js';
import type { Owner, RawBackend, RawFrontend, RawState } from '../../haproxy/model.js';
import { applyOperations } from '../../plan/apply.js';
import type { Operation, Plan } from '../../plan/plan.js';
import { prepareFileAtomic, removeTemporaries, writeFileAtomic } from '../../store/atomic-file.js';
import {
  type ApplyReport,
  errorText,
  type Provider,
  type ProviderInfo,
  type ProviderTraffic,
  ReloadFailedError,
  TerminalError,
} from '../provider.js';
import type { StockHaproxyConfig } from './config.js';
import { MasterCli, sleep } from './master-cli.js';
import {
  defaultsNameFor,
  generationOf,
  OwnedFileParseError,
  type ParsedOwnedFile,
  parseOwnedFile,
  renderOwnedFile,
  UnsafeValueError,
} from './owned-file.js';
import {
  DYNAMIC_ALGORITHMS,
  type ProcState,
  parseReloadAnswer,
  parseServersState,
  parseShowBackend,
  parseShowProc,
  parseShowStat,
  type RunningProxy,
  type RunningServer,
  reloadProgress,
  runtime,
} from './runtime-text.js';

/** The owned file is configuration, not a secret: HAProxy (possibly another user) must read it. */
const OWNED_FILE_MODE = 0o644;
const CHECK_OUTPUT_LIMIT = 16 * 1024 * 1024;
const CONFIRM_MS = 10_000;
/** Runtime commands per master-CLI line: ~100 address changes stay well inside HAProxy's 16 kB buffer. */
const MOVES_PER_LINE = 100;
const READ_RETRY_MS = 5_000;

export interface StockHaproxyDeps {
  logger: Logger;
  /** Whose tags the objects written carry; its id also names the owned file's `defaults`. */
  owner: Owner;
  /** Counts every master-CLI command and the owned file's bytes when written (the provider metrics). */
  traffic?: ProviderTraffic;
}

/** What one read found: the owned file, what HAProxy runs, and the raw state made of both. */
interface Snapshot {
  text: string;
  parsed: ParsedOwnedFile;
  raw: RawState;
  /** Names of the sections the owned file holds. */
  inFile: Set<string>;
  /** False when HAProxy does not run the structure the owned file describes (an interrupted apply, an edit). */
  consistent: boolean;
  /** The master's reload count and current worker when it was taken: a reload since makes it stale. */
  proc: { reloads: number; worker: number | undefined };
}

class RuntimeCommandError extends Error {
  override readonly name = 'RuntimeCommandError';
}

/**
 * The provider for a stock HAProxy (`KUBEBYON_PROVIDER=haproxy`): the service owns one configuration file
 * that HAProxy loads as its last `-f`, and talks to HAProxy through the master CLI only.
 *
 * - read: the owned file gives the structure (frontend, rules, backends, tags); the current worker's
 *   `show stat` and `show servers state` give what runs (servers as the runtime API left them, and the
 *   foreign proxies, untagged). The owned frontend's `id` is a hash of the file's structure, so a file that
 *   HAProxy has not loaded is noticed and reloaded rather than trusted.
 * - apply, servers only: runtime commands on the current worker, then the file is rewritten (no reload).
 * - apply, anything else: render the file, `haproxy -c` it with the operator's files, put it in place
 *   atomically, `reload` through the master, and confirm that the new worker runs the new structure; a
 *   reload HAProxy refuses puts the previous file back (`ReloadFailedError`, with HAProxy's words on 3.0).
 */
export class StockHaproxyProvider implements Provider {
  readonly name = 'haproxy';
  private readonly cli: MasterCli;
  private cache: { text: string; parsed: ParsedOwnedFile; generation: number } | undefined;
  /** What each read found besides its raw state, for the apply handed that state (`apply(plan, current)`). */
  private readonly reads = new WeakMap<RawState, Snapshot>();
  private readonly defaultsName: string;
  private queue: Promise<unknown> = Promise.resolve();
  private swept = false;

  constructor(
    private readonly config: StockHaproxyConfig,
    private readonly deps: StockHaproxyDeps,
  ) {
    this.cli = new MasterCli(config.masterSocket, undefined, deps.traffic);
    this.defaultsName = defaultsNameFor(deps.owner.id);
  }

  async ping(signal: AbortSignal): Promise<ProviderInfo> {
    const answer = (await this.read('show version', signal)).trim();
    if (!/^[0-9]+\.[0-9]+/.test(answer))
      throw new Error(`unexpected answer to show version: ${answer.slice(0, 100)}`);
    return { version: `HAProxy ${answer.split('\n')[0]}`, endpoint: this.config.masterSocket };
  }

  async readState(signal: AbortSignal): Promise<RawState> {
    const snap = await this.snapshot(signal);
    this.reads.set(snap.raw, snap);
    return snap.raw;
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
    // Before this service's first write to the owned file, nothing of its own can be in flight: a candidate
    // file beside it is what a killed predecessor left between writing and checking it.
    if (!this.swept) {
      this.swept = true;
      const removed = await removeTemporaries(this.config.ownedFile);
      if (removed.length > 0)
        this.deps.logger.info({ removed }, 'removed temporary files of an interrupted apply');
    }
    const sentBefore = this.cli.sent;
    const requests = () => this.cli.sent - sentBefore;
    const snap = await this.stillCurrent(current, signal);
    const target = applyOperations(snap.raw, plan.operations, this.deps.owner);
    const inFile = new Set(snap.inFile);
    for (const op of plan.operations) {
      if (op.kind === 'create_frontend') inFile.add(op.frontend.name);
      if (op.kind === 'create_backend') inFile.add(op.backend.name);
    }
    const fileState: RawState = {
      frontends: target.frontends.filter((f) => inFile.has(f.name)),
      backends: target.backends.filter((b) => inFile.has(b.name)),
    };
    let text: string;
    try {
      text = renderOwnedFile(fileState, this.defaultsName);
    } catch (err) {
      if (err instanceof UnsafeValueError) throw new TerminalError(err.message);
      throw err;
    }

    if (snap.consistent && runtimeOnly(plan.operations, snap.raw)) {
      try {
        await this.applyAtRuntime(plan.operations, snap.raw, text, signal);
        return { reload: 'none', requests: requests() };
      } catch (err) {
        if (signal.aborted) throw err;
        this.deps.logger.warn(
          { err: errorText(err) },
          'runtime change failed; applying it with a reload instead',
        );
      }
    }
    const generation = fileState.frontends.length > 0 ? generationOf(fileState) : null;
    const firstFrontend =
      [...fileState.frontends].sort((a, b) => (a.name < b.name ? -1 : 1))[0]?.name ?? null;
    await this.applyByReload(snap.text, text, firstFrontend, generation, signal);
    return { reload: 'succeeded', requests: requests() };
  }

  // ---- reading ----------------------------------------------------------------------------------------

  /**
   * A read-only command, tried again for a few seconds on any failure: while the master re-executes itself
   * on a reload (ours or the operator's) it may take a connection and then reset it.
   */
  private async read(command: string, signal: AbortSignal): Promise<string> {
    const deadline = Date.now() + READ_RETRY_MS;
    for (;;) {
      const answer = await this.cli.sendRetrying(command, signal, deadline);
      // An empty answer is a connection the re-executing master closed unread.
      if (answer.trim() !== '' || Date.now() > deadline) return answer;
      await sleep(50, signal);
    }
  }

  private async readOwnedFile(): Promise<{ text: string; parsed: ParsedOwnedFile; generation: number }> {
    let text: string;
    try {
      text = await readFile(this.config.ownedFile, 'utf8');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
      text = '';
    }
    if (this.cache?.text === text) return this.cache;
    try {
      const parsed = parseOwnedFile(text, this.defaultsName);
      this.cache = { text, parsed, generation: generationOf(parsed.state) };
    } catch (err) {
      if (err instanceof OwnedFileParseError)
        throw new TerminalError(
          `the owned file ${this.config.ownedFile} holds what this service did not write (${err.message}); restore it, or empty it and reload HAProxy`,
        );
      throw err;
    }
    return this.cache;
  }

  /**
   * The state to apply a plan to: the read the plan was made from when neither the owned file nor HAProxy's
   * workers have changed since (one `show proc` instead of reading every proxy and server again), else a new
   * read. A read serves one apply: the next one starts from what that apply left.
   */
  private async stillCurrent(current: RawState, signal: AbortSignal): Promise<Snapshot> {
    const last = this.reads.get(current);
    this.reads.delete(current);
    if (last) {
      const proc = parseShowProc(await this.read('show proc', signal));
      const { text } = await this.readOwnedFile();
      if (text === last.text && proc.reloads === last.proc.reloads && proc.workers[0] === last.proc.worker)
        return last;
    }
    return this.snapshot(signal);
  }

  private async snapshot(signal: AbortSignal): Promise<Snapshot> {
    const proc = parseShowProc(await this.read('show proc', signal));
    const { text, parsed, generation } = await this.readOwnedFile();
    // With an owned frontend, its id (the file's structure hash) tells whether HAProxy runs the file's
    // backends with their algorithms: the frontends' stats and the backends' names are enough, a small part
    // of every backend's statistics (≈ 1.7 MB at 5000 routes).
    const fileBalance = new Map(parsed.state.backends.map((b) => [b.name, b.balance]));
    const proxies =
      parsed.state.frontends.length > 0
        ? [
            ...parseShowStat(await this.read('@1 show stat -1 1 -1', signal)),
            ...parseShowBackend(await this.read('@1 show backend', signal)).map(
              (name): RunningProxy => ({
                name,
                kind: 'backend',
                id: 0,
                algo: fileBalance.get(name) ?? '',
              }),
            ),
          ]
        : parseShowStat(await this.read('@1 show stat -1 3 -1', signal));
    const servers = parseServersState(await this.read('@1 show servers state', signal));
    const runningFrontends = new Map<string, RunningProxy>();
    const runningBackends = new Map<string, RunningProxy>();
    for (const p of proxies) (p.kind === 'frontend' ? runningFrontends : runningBackends).set(p.name, p);
    const serversOf = new Map<string, RunningServer[]>();
    for (const s of servers) {
      const list = serversOf.get(s.backend);
      if (list) list.push(s);
      else serversOf.set(s.backend, [s]);
    }

    const file = parsed.state;
    const fileNames = new Set([...file.frontends.map((f) => f.name), ...file.backends.map((b) => b.name)]);
    const inFile = new Set(fileNames);
    const first = [...file.frontends].sort((a, b) => (a.name < b.name ? -1 : 1))[0];
    const consistent =
      (first === undefined
        ? parsed.generation === null
        : parsed.generation === generation && runningFrontends.get(first.name)?.id === parsed.generation) &&
      file.frontends.every((f) => runningFrontends.has(f.name)) &&
      file.backends.every((b) => runningBackends.get(b.name)?.algo === b.balance);
    if (!consistent)
      this.deps.logger.warn(
        { ownedFile: this.config.ownedFile },
        'HAProxy does not run the structure of the owned file; its objects are reported as missing so that the next apply reloads',
      );

    const withRuntimeServers = (b: RawBackend): RawBackend => {
      const tagsOf = new Map(b.servers.map((s) => [s.name, s.tags]));
      return {
        ...b,
        servers: (serversOf.get(b.name) ?? []).map((s) => ({
          name: s.name,
          address: s.address,
          port: s.port,
          check: s.check,
          tags: tagsOf.get(s.name) ?? {},
        })),
      };
    };
    const ownFrontends: RawFrontend[] = consistent ? file.frontends : [];
    const ownBackends = file.backends.filter((b) => runningBackends.has(b.name)).map(withRuntimeServers);
    if (!consistent) for (const f of file.frontends) inFile.delete(f.name);
    for (const b of file.backends) if (!runningBackends.has(b.name)) inFile.delete(b.name);

    const foreignFrontends: RawFrontend[] = [...runningFrontends.values()]
      .filter((p) => !fileNames.has(p.name))
      .map((p) => ({
        name: p.name,
        bind: null,
        inspectDelayMs: null,
        acceptsTlsHello: false,
        defaultBackend: null,
        rules: [],
        tags: {},
      }));
    // Another owner's backends are listed by name and servers: their settings are not read (nor needed).
    const foreignBackends: RawBackend[] = [...runningBackends.values()]
      .filter((p) => !fileNames.has(p.name))
      .map((p) => withRuntimeServers({ name: p.name, balance: '', servers: [], tags: {} }));
    return {
      text,
      parsed,
      inFile,
      consistent,
      proc: { reloads: proc.reloads, worker: proc.workers[0] },
      raw: {
        frontends: [...ownFrontends, ...foreignFrontends],
        backends: [...ownBackends, ...foreignBackends],
      },
    };
  }

  // ---- runtime changes --------------------------------------------------------------------------------

  private async run(cmd: { command: string; ok: RegExp }, signal: AbortSignal): Promise<void> {
    const answer = await this.cli.send(cmd.command, signal);
    if (!cmd.ok.test(answer.trim()))
      throw new RuntimeCommandError(
        `"${cmd.command}" answered ${JSON.stringify(answer.trim().slice(0, 300))}`,
      );
  }

  /**
   * Servers only: the file first (a crash after it leaves servers HAProxy does not run yet, which the next
   * read sees and plans again), then the runtime API on the current worker. A command that fails undoes
   * the ones before it, best effort, and the caller falls back to a reload of the same file.
   */
  private async applyAtRuntime(
    operations: readonly Operation[],
    current: RawState,
    text: string,
    signal: AbortSignal,
  ): Promise<void> {
    await this.writeOwnedFile(text);
    const undo: Array<{ command: string; ok: RegExp }> = [];
    const undoMoves: Array<{ command: string; ok: RegExp }> = [];
    const started = Date.now();
    const backends = new Map(current.backends.map((b) => [b.name, b]));
    // Address changes go many to a line (`;`-separated): a node move under thousands of clusters is a few
    // dozen connections to the master instead of one each.
    type Cmd = { command: string; ok: RegExp };
    let moves: Array<Cmd & { undo: Cmd | undefined }> = [];
    const flushMoves = async () => {
      const batch = moves;
      moves = [];
      try {
        await this.runBatch(batch, signal);
      } finally {
        // Whatever part of the batch ran is undone with the rest on failure (setting an address is idempotent).
        undoMoves.push(...batch.map((m) => m.undo).filter((u): u is Cmd => u !== undefined));
      }
    };
    try {
      for (const op of operations) {
        if (op.kind !== 'update_server' && moves.length > 0) await flushMoves();
        if (op.kind === 'update_server') {
          const before = backends.get(op.backend)?.servers.find((s) => s.name === op.server.name);
          moves.push({
            ...runtime.setAddr(op.backend, op.server.name, op.server.address, op.server.port),
            undo: before
              ? runtime.setAddr(op.backend, op.server.name, before.address, before.port)
              : undefined,
          });
          if (moves.length >= MOVES_PER_LINE) await flushMoves();
        } else if (op.kind === 'create_server') {
          const { name, address, port, check } = op.server;
          await this.run(runtime.add(op.backend, name, address, port, check), signal);
          undo.push(runtime.del(op.backend, name), runtime.disable(op.backend, name));
          // Dynamic servers start in maintenance, with their checks off.
          await this.run(runtime.enable(op.backend, name), signal);
          if (check) await this.run(runtime.enableHealth(op.backend, name), signal);
        } else if (op.kind === 'delete_server') {
          const { name, address, port, check } = op.server;
          await this.run(runtime.disable(op.backend, name), signal);
          undo.push(runtime.enable(op.backend, name));
          // The endpoint is gone from the topology: its sessions go too, or `del server` would wait for them.
          await this.run(runtime.shutdownSessions(op.backend, name), signal);
          await this.deleteServer(op.backend, name, signal);
          undo.pop();
          undo.push(
            ...(check ? [runtime.enableHealth(op.backend, name)] : []),
            runtime.enable(op.backend, name),
            runtime.add(op.backend, name, address, port, check),
          );
        }
      }
      if (moves.length > 0) await flushMoves();
    } catch (err) {
      if (undoMoves.length > 0)
        await this.runBatch(undoMoves, AbortSignal.timeout(30_000)).catch((e) =>
          this.deps.logger.warn({ err: errorText(e) }, 'undoing runtime address changes failed'),
        );
      for (const cmd of undo.reverse()) {
        await this.run(cmd, AbortSignal.timeout(5_000)).catch((e) =>
          this.deps.logger.warn({ err: errorText(e) }, 'undoing a runtime change failed'),
        );
      }
      throw err;
    }
    this.deps.logger.info(
      { operations: operations.length, ms: Date.now() - started },
      'servers changed through the runtime API, no reload',
    );
  }

  /** Commands sent `;`-separated on one line; each answers one paragraph, which must say it worked. */
  private async runBatch(cmds: Array<{ command: string; ok: RegExp }>, signal: AbortSignal): Promise<void> {
    for (let i = 0; i < cmds.length; i += MOVES_PER_LINE) {
      const chunk = cmds.slice(i, i + MOVES_PER_LINE);
      const answer = await this.cli.send(chunk.map((c) => c.command).join(';'), signal);
      const answers = answer
        .split(/\n\s*\n/)
        .map((a) => a.trim())
        .filter((a) => a !== '');
      chunk.forEach((c, k) => {
        if (!c.ok.test(answers[k] ?? ''))
          throw new RuntimeCommandError(
            `"${c.command}" answered ${JSON.stringify((answers[k] ?? '(nothing)').slice(0, 300))}`,
          );
      });
      if (answers.length !== chunk.length)
        throw new RuntimeCommandError(`${chunk.length} commands answered ${answers.length} times`);
    }
  }

  private async deleteServer(backend: string, name: string, signal: AbortSignal): Promise<void> {
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.run(runtime.del(backend, name), signal);
      } catch (err) {
        // Sessions that were just shut down may take a moment to let go of the server.
        if (attempt >= 10) throw err;
        await sleep(100, signal);
      }
    }
  }

  private async writeOwnedFile(text: string): Promise<void> {
    await writeFileAtomic(this.config.ownedFile, text, OWNED_FILE_MODE);
    this.deps.traffic?.bytes('sent', Buffer.byteLength(text));
  }

  // ---- reloads ----------------------------------------------------------------------------------------

  private async check(candidate: string, signal: AbortSignal): Promise<void> {
    const args = ['-c', ...this.config.checkFiles.flatMap((f) => ['-f', f]), '-f', candidate];
    await new Promise<void>((resolve, reject) => {
      execFile(
        this.config.haproxyBin,
        args,
        { signal, timeout: this.config.reloadTimeoutMs, maxBuffer: CHECK_OUTPUT_LIMIT },
        (err, stdout, stderr) => {
          if (!err) return resolve();
          if (signal.aborted) return reject(signal.reason);
          if ((err as { killed?: boolean }).killed)
            return reject(
              new Error(
                `${this.config.haproxyBin} -c did not finish within ${this.config.reloadTimeoutMs} ms`,
              ),
            );
          const code = (err as NodeJS.ErrnoException).code;
          if (typeof code === 'string')
            return reject(new TerminalError(`cannot run ${this.config.haproxyBin} -c: ${err.message}`));
          const output = `${stdout}\n${stderr}`.split(candidate).join(`${this.config.ownedFile} (candidate)`);
          const alerts = alertsIn(output);
          reject(
            new TerminalError(
              `HAProxy refuses the new configuration (haproxy -c): ${alerts.length > 0 ? alerts.join('; ') : output.trim().slice(-2000)}`,
            ),
          );
        },
      );
    });
  }

  private async applyByReload(
    previous: string,
    text: string,
    frontend: string | null,
    generation: number | null,
    signal: AbortSignal,
  ): Promise<void> {
    const prepared = await prepareFileAtomic(this.config.ownedFile, text, OWNED_FILE_MODE);
    this.deps.traffic?.bytes('sent', Buffer.byteLength(text));
    let before: ProcState;
    try {
      await this.check(prepared.tmpPath, signal);
      before = parseShowProc(await this.read('show proc', signal));
      signal.throwIfAborted();
    } catch (err) {
      await prepared.discard();
      throw err;
    }
    await prepared.commit();
    // Committed: the reload is seen through whatever the caller's signal says, bounded by the reload timeout.
    const started = Date.now();
    try {
      await this.reloadAndConfirm(before, frontend, generation);
    } catch (err) {
      await this.writeOwnedFile(previous);
      this.deps.logger.error(
        { err: errorText(err) },
        'reload failed; the previous owned file is back in place',
      );
      throw err;
    }
    this.deps.logger.info({ ms: Date.now() - started }, 'HAProxy reloaded with the new owned file');
  }

  private async reloadAndConfirm(before: ProcState, frontend: string | null, generation: number | null) {
    const deadline = Date.now() + this.config.reloadTimeoutMs;
    const bounded = AbortSignal.timeout(this.config.reloadTimeoutMs);
    // 3.0 answers once the new workers run (or failed); 2.6 closes the connection and answers nothing.
    const answer = parseReloadAnswer(
      await this.cli.send('reload', bounded, this.config.reloadTimeoutMs).catch(() => ''),
    );
    let proc: ProcState | undefined;
    // A restart of HAProxy during the reload (its container restarted) ends the wait too: waiting for the
    // new master's count to pass the old one would take the whole reload timeout.
    while (!proc || reloadProgress(before, proc) === 'pending') {
      if (Date.now() > deadline)
        throw new Error(`HAProxy did not report the reload within ${this.config.reloadTimeoutMs} ms`);
      if (proc) await sleep(50);
      proc = await this.cli
        .sendRetrying('show proc', bounded, deadline)
        .then(parseShowProc)
        .catch(() => undefined);
    }
    const restarted = reloadProgress(before, proc) === 'restarted';
    if (restarted)
      this.deps.logger.warn('HAProxy restarted during the reload; checking that it runs the new file');
    if (!restarted && (answer.status === 'failed' || proc.failed > before.failed)) {
      const why =
        answer.alerts.length > 0
          ? answer.alerts.join('; ')
          : 'HAProxy does not say why over the master CLI in this version; its own log has the reason';
      throw new ReloadFailedError(`HAProxy refused the new configuration and keeps the previous one: ${why}`);
    }
    if (frontend === null || generation === null) return;
    // The master says the reload worked: its new worker answers within moments, running the new file.
    const confirmBy = Math.min(deadline, Date.now() + CONFIRM_MS);
    for (;;) {
      const running = await this.cli
        .sendRetrying('@1 show stat -1 1 -1', bounded, confirmBy)
        .then(parseShowStat)
        .catch(() => []);
      if (running.find((p) => p.name === frontend)?.id === generation) return;
      if (Date.now() > confirmBy)
        throw new TerminalError(
          `HAProxy reloaded but does not run the owned file: is it started with -f ${this.config.ownedFile} (or a path to the same file)?`,
        );
      await sleep(50);
    }
  }
}

/** Whether the runtime API can apply these operations without a reload. */
function runtimeOnly(operations: readonly Operation[], current: RawState): boolean {
  const backends = new Map(current.backends.map((b) => [b.name, b]));
  return operations.every((op) => {
    const backend = 'backend' in op && typeof op.backend === 'string' ? backends.get(op.backend) : undefined;
    if (op.kind === 'delete_server') return backend !== undefined;
    if (op.kind === 'create_server') return backend !== undefined && DYNAMIC_ALGORITHMS.has(backend.balance);
    if (op.kind === 'update_server') {
      const server = backend?.servers.find((s) => s.name === op.server.name);
      // Turning checks on or off is a reload: a server's check settings are fixed when it is created.
      return server !== undefined && server.check === op.server.check;
    }
    return false;
  });
}
