import type { SlotAllowIndex } from '../../haproxy/allow-file.js';
import type { SlotMapOp } from '../../haproxy/slot-allow.js';
import { errorText } from '../../model/errors.js';
import { isHaproxyName } from '../../naming/names.js';
import type { Operation } from '../../plan/plan.js';
import type { Reading } from '../../plan/reading.js';
import { isMapEntry, isMapKey, mapPath, mapRuntime } from './map-file.js';
import { sleep } from './master-cli.js';
import { runtime } from './runtime-text.js';
import { UnsafeValueError } from './safe-values.js';
import { mapDirOf, type Session } from './session.js';

/** Runtime commands per master-CLI line: ~100 address changes stay well inside HAProxy's 16 kB buffer. */
const MOVES_PER_LINE = 100;
/**
 * Allow-map commands go several to a line too, within this many bytes (half the buffer: a map's path may be
 * long). One line per key put lists on 5000 clusters × 16 networks in 233-415 s (`bench/networks.ts`).
 */
const ALLOW_LINE_BYTES = 8_000;

type Cmd = { command: string; ok: RegExp };
type CreateServer = Extract<Operation, { kind: 'create_server' }>;
type DeleteServer = Extract<Operation, { kind: 'delete_server' }>;
type UpdateServer = Extract<Operation, { kind: 'update_server' }>;
type SetEntry = Extract<Operation, { kind: 'set_map_entry' }>;
type DeleteEntry = Extract<Operation, { kind: 'delete_map_entry' }>;
type AllowEntry = Extract<Operation, { kind: 'add_allow_entry' | 'delete_allow_entry' }>;

class RuntimeCommandError extends Error {
  override readonly name = 'RuntimeCommandError';
}

/**
 * Servers and map entries, through the runtime API on the current worker, in the plan's order (a new
 * route's servers before its map entry; a deleted route's entry before its servers). The files HAProxy
 * loads are written after, off this path (`persist.ts`): until then a reload by anyone loses the change,
 * which the next read sees (a new worker) and plans again. A command that fails undoes the ones before it,
 * best effort, and the caller falls back to a reload. Allow-map keys become changes of the slots' own maps
 * (`allow`, following `current`'s allow map: `slot-allow.ts`).
 */
export async function applyAtRuntime(
  s: Session,
  operations: readonly Operation[],
  current: Reading,
  signal: AbortSignal,
  allow: SlotAllowIndex,
): Promise<void> {
  const started = Date.now();
  const change = new RuntimeChange(s, current, signal, allow.stepsFrom(operations, current.state));
  try {
    for (let i = 0; i < operations.length; i++) {
      const op = operations[i] as Operation;
      const next = operations[i + 1];
      // A new route's last server and its map entry: one line to the master, so the route is routable
      // after one round trip (the entry still runs after the server is added and enabled).
      if (
        op.kind === 'create_server' &&
        next?.kind === 'set_map_entry' &&
        next.previous === null &&
        next.backend === op.backend
      ) {
        await change.createServer(op, next);
        i++;
      } else await change.apply(op);
    }
    await change.flushMoves();
    await change.flushAllows();
  } catch (err) {
    await change.undo();
    throw err;
  }
  s.logger.info(
    { operations: operations.length, ms: Date.now() - started },
    'changed through the runtime API, no reload',
  );
}

/** One apply's runtime commands, and what undoes those that ran. */
class RuntimeChange {
  /** Undoes of single commands, in the order they ran (undone in reverse). */
  private readonly undos: Cmd[] = [];
  /** Undoes of address changes, sent batched like the changes. */
  private readonly undoMoves: Cmd[] = [];
  /** Address changes not sent yet. */
  private moves: Array<Cmd & { undo: Cmd | undefined }> = [];
  /** Allow-map commands not sent yet, and their bytes. */
  private allows: Array<Cmd & { undo: Cmd | undefined }> = [];
  private allowBytes = 0;

  constructor(
    private readonly s: Session,
    private readonly current: Reading,
    private readonly signal: AbortSignal,
    private readonly slotSteps: ReadonlyMap<Operation, readonly SlotMapOp[]>,
  ) {}

  async apply(op: Operation): Promise<void> {
    if (op.kind !== 'update_server') await this.flushMoves();
    if (op.kind !== 'add_allow_entry' && op.kind !== 'delete_allow_entry') await this.flushAllows();
    if (op.kind === 'update_server') await this.move(op);
    else if (op.kind === 'create_server') await this.createServer(op);
    else if (op.kind === 'delete_server') await this.deleteServer(op);
    else if (op.kind === 'set_map_entry') await this.setEntry(op);
    else if (op.kind === 'delete_map_entry') await this.deleteEntry(op);
    else if (op.kind === 'add_allow_entry' || op.kind === 'delete_allow_entry') await this.allowEntry(op);
  }

  /**
   * An allow-map key (authorized networks), added or removed: the changes of its slot's map it makes, each
   * undone the other way. Sent with the allow-map commands next to it in the plan, in its order, on one line
   * (`flushAllows`).
   */
  private async allowEntry(op: AllowEntry): Promise<void> {
    for (const m of this.slotSteps.get(op) ?? []) {
      const path = mapPath(mapDirOf(this.s), m.map);
      const cmd =
        m.kind === 'add'
          ? { ...mapRuntime.add(path, m.network, m.value), undo: mapRuntime.del(path, m.network) }
          : {
              ...mapRuntime.del(path, m.network),
              undo: isMapEntry(m.network, m.value) ? mapRuntime.add(path, m.network, m.value) : undefined,
            };
      if (this.allowBytes + cmd.command.length + 1 > ALLOW_LINE_BYTES) await this.flushAllows();
      this.allows.push(cmd);
      this.allowBytes += cmd.command.length + 1;
    }
  }

  /**
   * The allow-map commands not sent yet, `;`-separated on one line closed by `show version`: each answers
   * nothing when it worked, so any other text is a failure, and a cut answer lacks the version. On failure
   * every command of the line is undone (a `del map` of a key that was not added answers an error, logged;
   * an `add map` of a key still there makes a duplicate of the same value, which a `del map` removes too).
   */
  async flushAllows(): Promise<void> {
    if (this.allows.length === 0) return;
    const batch = this.allows;
    this.allows = [];
    this.allowBytes = 0;
    this.undos.push(...batch.map((c) => c.undo).filter((u): u is Cmd => u !== undefined));
    const line = batch.map((c) => c.command).join(';');
    const answer = (await this.s.cli.send(`${line};@1 show version`, this.signal)).trim();
    if (!/^[0-9]+\.[0-9]+\S*$/.test(answer))
      throw new RuntimeCommandError(
        `${batch.length} allow-map commands answered ${JSON.stringify(answer.slice(0, 300))}`,
      );
  }

  /** `add map` for a new key (a second `add` would make a duplicate entry), `set map` to move one. */
  private async setEntry(op: SetEntry): Promise<void> {
    const path = mapPath(mapDirOf(this.s), op.map);
    if (op.previous === null) {
      await run(this.s, mapRuntime.add(path, op.host, op.backend), this.signal);
      this.undos.push(mapRuntime.del(path, op.host));
    } else {
      await run(this.s, mapRuntime.set(path, op.host, op.backend), this.signal);
      this.undos.push(mapRuntime.set(path, op.host, op.previous));
    }
  }

  private async deleteEntry(op: DeleteEntry): Promise<void> {
    const path = mapPath(mapDirOf(this.s), op.map);
    await run(this.s, mapRuntime.del(path, op.host), this.signal);
    // A key added by hand that this service would never write is not put back by an undo either.
    if (isMapKey(op.host) && isHaproxyName(op.backend))
      this.undos.push(mapRuntime.add(path, op.host, op.backend));
  }

  /**
   * Address changes go many to a line (`;`-separated): a node move under thousands of clusters is a few
   * dozen connections to the master instead of one each.
   */
  private async move(op: UpdateServer): Promise<void> {
    const before = this.current.backend(op.backend)?.servers.find((s) => s.name === op.server.name);
    this.moves.push({
      ...runtime.setAddr(op.backend, op.server.name, op.server.address, op.server.port),
      undo: before
        ? unlessUnsafe(() => runtime.setAddr(op.backend, op.server.name, before.address, before.port))
        : undefined,
    });
    if (this.moves.length >= MOVES_PER_LINE) await this.flushMoves();
  }

  async flushMoves(): Promise<void> {
    if (this.moves.length === 0) return;
    const batch = this.moves;
    this.moves = [];
    try {
      await runBatch(this.s, batch, this.signal);
    } finally {
      // Whatever part of the batch ran is undone with the rest on failure (setting an address is idempotent).
      this.undoMoves.push(...batch.map((m) => m.undo).filter((u): u is Cmd => u !== undefined));
    }
  }

  /**
   * `add server`, `enable server` (dynamic servers start in maintenance, checks off), `enable health` when
   * checked, and `entry`'s `add map` when given: one line, closed by `show version` so that a cut answer is
   * told from commands that answer nothing. Only `add server` answers; any other text is a failure.
   */
  async createServer(op: CreateServer, entry?: SetEntry): Promise<void> {
    await this.flushMoves();
    await this.flushAllows();
    const { name, address, port, check } = op.server;
    const add = runtime.add(op.backend, name, address, port, check);
    const quiet = [runtime.enable(op.backend, name)];
    if (check) quiet.push(runtime.enableHealth(op.backend, name));
    let undoEntry: Cmd | undefined;
    if (entry) {
      const path = mapPath(mapDirOf(this.s), entry.map);
      quiet.push(mapRuntime.add(path, entry.host, entry.backend));
      undoEntry = mapRuntime.del(path, entry.host);
    }
    const line = [add, ...quiet].map((c) => c.command).join(';');
    const answer = await this.s.cli.send(`${line};@1 show version`, this.signal);
    const lines = answer
      .split('\n')
      .map((l) => l.trim())
      .filter((l) => l !== '');
    if (add.ok.test(lines[0] ?? ''))
      this.undos.push(runtime.del(op.backend, name), runtime.disable(op.backend, name));
    // The entry is undone even if its command did not run: the host had no entry (`previous` null).
    if (undoEntry) this.undos.push(undoEntry);
    if (!add.ok.test(lines[0] ?? '') || lines.length !== 2 || !/^[0-9]+\.[0-9]+/.test(lines[1] ?? ''))
      throw new RuntimeCommandError(`"${line}" answered ${JSON.stringify(answer.trim().slice(0, 300))}`);
  }

  private async deleteServer(op: DeleteServer): Promise<void> {
    const { name, address, port, check } = op.server;
    // Made before anything is sent.
    const readd = unlessUnsafe(() => runtime.add(op.backend, name, address, port, check));
    await run(this.s, runtime.disable(op.backend, name), this.signal);
    this.undos.push(runtime.enable(op.backend, name));
    // The endpoint is gone from the topology: its sessions go too, or `del server` would wait for them.
    await run(this.s, runtime.shutdownSessions(op.backend, name), this.signal);
    await delServer(this.s, op.backend, name, this.signal);
    this.undos.pop();
    if (readd)
      this.undos.push(
        ...(check ? [runtime.enableHealth(op.backend, name)] : []),
        runtime.enable(op.backend, name),
        readd,
      );
  }

  /** Best effort, each on its own timeout: the caller's signal may be what ended the change. */
  async undo(): Promise<void> {
    const { logger } = this.s;
    if (this.undoMoves.length > 0)
      await runBatch(this.s, this.undoMoves, AbortSignal.timeout(30_000)).catch((e) =>
        logger.warn({ err: errorText(e) }, 'undoing runtime address changes failed'),
      );
    for (const cmd of this.undos.reverse()) {
      await run(this.s, cmd, AbortSignal.timeout(5_000)).catch((e) =>
        logger.warn({ err: errorText(e) }, 'undoing a runtime change failed'),
      );
    }
  }
}

/**
 * An undo made of what HAProxy ran before (read back, possibly set by hand): undefined when it holds what
 * this service would never send (an address that is not an IP address), which is then not put back.
 */
function unlessUnsafe(make: () => Cmd): Cmd | undefined {
  try {
    return make();
  } catch (err) {
    if (err instanceof UnsafeValueError) return undefined;
    throw err;
  }
}

async function run(s: Session, cmd: Cmd, signal: AbortSignal): Promise<void> {
  const answer = await s.cli.send(cmd.command, signal);
  if (!cmd.ok.test(answer.trim()))
    throw new RuntimeCommandError(`"${cmd.command}" answered ${JSON.stringify(answer.trim().slice(0, 300))}`);
}

/** Commands sent `;`-separated on one line; each answers one paragraph, which must say it worked. */
async function runBatch(s: Session, cmds: readonly Cmd[], signal: AbortSignal): Promise<void> {
  for (let i = 0; i < cmds.length; i += MOVES_PER_LINE) {
    const chunk = cmds.slice(i, i + MOVES_PER_LINE);
    const answer = await s.cli.send(chunk.map((c) => c.command).join(';'), signal);
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

async function delServer(s: Session, backend: string, name: string, signal: AbortSignal): Promise<void> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await run(s, runtime.del(backend, name), signal);
    } catch (err) {
      // Sessions that were just shut down may take a moment to let go of the server.
      if (attempt >= 40) throw err;
      await sleep(25, signal);
    }
  }
}
