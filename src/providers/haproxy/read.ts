import { readFile, stat } from 'node:fs/promises';
import { ALLOW_VALUE } from '../../haproxy/allow-keys.js';
import type { RawBackend, RawFrontend, RawMap, RawState } from '../../haproxy/model.js';
import { keysOfSlotMap, slotAllowMapName } from '../../haproxy/slot-allow.js';
import { TerminalError } from '../../model/errors.js';
import { mapPath, parseShowMap, parseShowMaps, showMapCommand, showMapsCommands } from './map-file.js';
import { generationCarrier, generationOf } from './owned-file.js';
import { OwnedFileParseError, type ParsedOwnedFile, parseOwnedFile } from './owned-file-parse.js';
import {
  parseServersState,
  parseShowBackend,
  parseShowProc,
  parseShowStat,
  type RunningProxy,
  type RunningServer,
} from './runtime-text.js';
import { mapDirOf, readCommand, type Session } from './session.js';

/**
 * What one read found: the owned file, what HAProxy runs, and the raw state made of both; moved on by each
 * runtime apply (`raw`: what runs now). Not the parsed file: a reading lives until the next full read, and
 * the parsed objects it would keep (each with its rendered text in `owned-file.ts`'s caches) are a second
 * copy of every backend once applies have moved `raw` on (about 15 MB at N = 20000).
 */
export interface FileReading {
  text: string;
  raw: RawState;
  /** Names of the sections the owned file holds. */
  inFile: Set<string>;
  /** False when HAProxy does not run the structure the owned file describes (an interrupted apply, an edit). */
  consistent: boolean;
}

interface OwnedFile {
  text: string;
  parsed: ParsedOwnedFile;
  /** The generation of the parsed structure (what the file's `id` should say, if it was not edited). */
  generation: number;
  /** The file's inode, size and modification time when `text` was read (null: not known). */
  signature: string | null;
}

/** The owned file as last read, parsed again only when its text changes. */
export class OwnedFileCache {
  private cache: OwnedFile | undefined;

  constructor(
    private readonly path: string,
    private readonly defaultsName: string,
    private readonly mapDir: string,
    /** The owner's allow map (`readEdge`). */
    private readonly allowMap?: string,
  ) {}

  /**
   * What this service just wrote to the file (or found it holds), so that the next read does not parse it
   * again; `state` replaces the parsed objects, so that one copy of each backend is kept, not two.
   */
  remember(text: string, state: RawState): void {
    const generation = generationOf(state);
    const parsed = { state, generation: generationCarrier(state) === null ? null : generation };
    // The same text: the file was not written, and the inode and time read last still stand for it.
    const signature = this.cache?.text === text ? this.cache.signature : null;
    this.cache = { text, parsed, generation, signature };
  }

  async read(): Promise<OwnedFile> {
    // A file whose inode, size and modification time are as last read is not read again (every write of
    // ours is a rename, a new inode): a pass over thousands of routes does not re-read a megabyte.
    const signature = await stat(this.path).then(
      (st) => `${st.ino}:${st.size}:${st.mtimeMs}`,
      (err: NodeJS.ErrnoException) => {
        if (err.code === 'ENOENT') return null;
        throw err;
      },
    );
    if (this.cache && signature !== null && this.cache.signature === signature) return this.cache;
    let text: string;
    try {
      text = await readFile(this.path, 'utf8');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
      text = '';
    }
    if (this.cache?.text === text) {
      this.cache.signature = signature;
      return this.cache;
    }
    try {
      const parsed = parseOwnedFile(text, this.defaultsName, this.mapDir, this.allowMap);
      this.cache = { text, parsed, generation: generationOf(parsed.state), signature };
    } catch (err) {
      if (err instanceof OwnedFileParseError)
        throw new TerminalError(
          `the owned file ${this.path} holds what this service did not write (${err.message}); restore it, or empty it and reload HAProxy`,
        );
      throw err;
    }
    return this.cache;
  }
}

/** What the current worker runs: its proxies by name, and its servers by backend. */
interface Running {
  frontends: Map<string, RunningProxy>;
  backends: Map<string, RunningProxy>;
  serversOf: Map<string, RunningServer[]>;
}

/**
 * Which HAProxy runs: the master's reload count, the current worker's pid and its start time. A reload
 * changes the first two; a restart (a container restarted with the same pids and a count back at 0) the
 * last. One master-CLI line.
 */
export interface Generation {
  reloads: number;
  worker: number | undefined;
  startedAt: number | undefined;
}

export async function workerGeneration(s: Session, signal: AbortSignal): Promise<Generation> {
  const answer = await readCommand(s, 'show proc;@1 show info', signal);
  const proc = parseShowProc(answer);
  const started = /^Start_time_sec:\s*([0-9]+)\s*$/m.exec(answer);
  return {
    reloads: proc.reloads,
    worker: proc.workers[0],
    startedAt: started ? Number(started[1]) : undefined,
  };
}

/** Reads the owned file and what HAProxy runs, and makes one raw state of both. */
export async function takeReading(
  s: Session,
  owned: OwnedFileCache,
  signal: AbortSignal,
): Promise<FileReading> {
  const { text, parsed, generation } = await owned.read();
  const running = await readRunning(s, parsed.state, signal);
  const consistent = runsTheFile(parsed, generation, running);
  if (!consistent)
    s.logger.warn(
      { ownedFile: s.config.ownedFile },
      'HAProxy does not run the structure of the owned file; its objects are reported as missing so that the next apply reloads',
    );
  const { raw, inFile } = stateOf(parsed.state, running, consistent);
  const maps = consistent ? await readMaps(s, parsed.state, signal) : [];
  return { text, consistent, raw: maps.length > 0 ? { ...raw, maps } : raw, inFile };
}

/**
 * The maps of the owned frontends as the current worker runs them: the SNI map each routes by, and the
 * logical allow map its guard stands for, made of the slots' own maps (`slot-allow.ts`; a slot without its
 * guard holds no keys: the planner writes the guard).
 */
async function readMaps(s: Session, file: RawState, signal: AbortSignal): Promise<RawMap[]> {
  const maps: RawMap[] = [];
  for (const f of file.frontends) {
    if (f.sniMap && !maps.some((m) => m.name === f.sniMap)) {
      const answer = await readCommand(s, showMapCommand(mapPath(mapDirOf(s), f.sniMap)), signal);
      maps.push({ name: f.sniMap, entries: parseShowMap(answer) });
    }
    const allow = f.edge?.allowMap;
    if (allow && !maps.some((m) => m.name === allow)) maps.push(await readAllowMap(s, file, allow, signal));
  }
  return maps;
}

/** The logical allow map `name`, from the maps of the file's slots that guard by theirs. */
async function readAllowMap(s: Session, file: RawState, name: string, signal: AbortSignal): Promise<RawMap> {
  const slots = file.backends.filter((b) => b.allowMap && b.allowMap === slotAllowMapName(name, b.name));
  const entries = new Map<string, string>();
  let next = 0;
  for (const line of showMapsCommands(slots.map((b) => mapPath(mapDirOf(s), b.allowMap as string)))) {
    const answer = await readCommand(s, line.join(';'), signal);
    for (const slotEntries of parseShowMaps(answer, line.length)) {
      const slot = (slots[next++] as RawBackend).name;
      for (const key of keysOfSlotMap(slot, slotEntries)) entries.set(key, ALLOW_VALUE);
    }
  }
  return { name, entries };
}

async function readRunning(s: Session, file: RawState, signal: AbortSignal): Promise<Running> {
  // With an owned frontend, its id (the file's structure hash) tells whether HAProxy runs the file's
  // backends with their algorithms: the frontends' stats and the backends' names are enough, a small part
  // of every backend's statistics (≈ 1.7 MB at 5000 routes).
  const fileBalance = new Map(file.backends.map((b) => [b.name, b.balance]));
  const proxies =
    file.frontends.length > 0
      ? [
          ...parseShowStat(await readCommand(s, '@1 show stat -1 1 -1', signal)),
          ...parseShowBackend(await readCommand(s, '@1 show backend', signal)).map(
            (name): RunningProxy => ({ name, kind: 'backend', id: 0, algo: fileBalance.get(name) ?? '' }),
          ),
        ]
      : parseShowStat(await readCommand(s, '@1 show stat -1 3 -1', signal));
  const servers = parseServersState(await readCommand(s, '@1 show servers state', signal));
  const running: Running = { frontends: new Map(), backends: new Map(), serversOf: new Map() };
  for (const p of proxies) (p.kind === 'frontend' ? running.frontends : running.backends).set(p.name, p);
  for (const srv of servers) {
    const list = running.serversOf.get(srv.backend);
    if (list) list.push(srv);
    else running.serversOf.set(srv.backend, [srv]);
  }
  return running;
}

/** Whether HAProxy runs the structure the owned file describes (its frontend's id, its backends' algorithms). */
function runsTheFile(parsed: ParsedOwnedFile, generation: number, running: Running): boolean {
  const file = parsed.state;
  const carrier = generationCarrier(file);
  return (
    (carrier === null
      ? parsed.generation === null
      : parsed.generation === generation && running.frontends.get(carrier)?.id === parsed.generation) &&
    file.frontends.every((f) => running.frontends.has(f.name)) &&
    file.backends.every((b) => running.backends.get(b.name)?.algo === b.balance)
  );
}

/**
 * The raw state: the file's objects that run (its frontends only when HAProxy runs the whole structure), with
 * servers as the worker runs them, then the proxies of other owners, untagged.
 */
function stateOf(
  file: RawState,
  running: Running,
  consistent: boolean,
): { raw: RawState; inFile: Set<string> } {
  const fileNames = new Set([...file.frontends.map((f) => f.name), ...file.backends.map((b) => b.name)]);
  const inFile = new Set(fileNames);
  if (!consistent) for (const f of file.frontends) inFile.delete(f.name);
  for (const b of file.backends) if (!running.backends.has(b.name)) inFile.delete(b.name);

  const withServers = (b: RawBackend) => withRuntimeServers(b, running.serversOf.get(b.name) ?? []);
  const ownFrontends: readonly RawFrontend[] = consistent ? file.frontends : [];
  const ownBackends = file.backends.filter((b) => running.backends.has(b.name)).map(withServers);
  const foreignFrontends: RawFrontend[] = [...running.frontends.values()]
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
  const foreignBackends: RawBackend[] = [...running.backends.values()]
    .filter((p) => !fileNames.has(p.name))
    .map((p) => withServers({ name: p.name, balance: '', servers: [], tags: {} }));
  return {
    inFile,
    raw: {
      frontends: [...ownFrontends, ...foreignFrontends],
      backends: [...ownBackends, ...foreignBackends],
    },
  };
}

/**
 * `b` with the servers the worker runs (runtime drift included), tagged as the owned file tags them. A server
 * the file does not name yet (added at runtime and not persisted yet, or before a crash, or by hand) carries
 * no tags: the registry reads it as its backend's owner's.
 */
function withRuntimeServers(b: RawBackend, servers: readonly RunningServer[]): RawBackend {
  const tagsOf = new Map(b.servers.map((srv) => [srv.name, srv.tags]));
  const untracked = {};
  return {
    ...b,
    servers: servers.map((srv) => ({
      name: srv.name,
      address: srv.address,
      port: srv.port,
      check: srv.check,
      tags: tagsOf.get(srv.name) ?? untracked,
    })),
  };
}
