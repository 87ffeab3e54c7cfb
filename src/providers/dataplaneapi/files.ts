import type { Logger } from 'pino';
import type { SlotAllowIndex } from '../../haproxy/allow-file.js';
import type { BackendState, HaproxyState } from '../../haproxy/model.js';
import { slotAllowMapName } from '../../haproxy/slot-allow.js';
import { checkedName, checkedPort, checkedServerAddress } from './checked.js';
import type { Move } from './choose.js';
import { type DataplaneClient, DataplaneUnreachableError, versionOf } from './client.js';
import {
  backendLines,
  frontendLines,
  type LineTags,
  type SlotGuards,
  sectionKey,
  spliceSections,
} from './config-text.js';
import { type MapFiles, MapText } from './maps.js';
import type { ConfigReads } from './read.js';
import type { Counter, Workers } from './reload.js';
import { namedBackends, type SlotsFile, withoutDraining } from './slots.js';

/** What a write of the files brings in line with `target`. */
export interface FileWrite {
  /** What HAProxy is to run. */
  target: HaproxyState;
  /** Our frontends and backends whose sections are written from `target` (one not in it is removed). */
  frontends: ReadonlySet<string>;
  backends: ReadonlySet<string>;
  /** SNI maps, and slots' allow maps (`slot-allow.ts`), whose files are written with `target`'s entries. */
  maps: ReadonlySet<string>;
  /** Servers (`backend/server`) left draining at runtime: they stay out of the files. */
  draining: ReadonlySet<string>;
  /** Load what is written with one reload (else the next reload, by anyone, loads it). */
  reload: boolean;
  /** Endpoint moves HAProxy makes in place as the file is taken (`X-Runtime-Actions`), without a reload. */
  moves?: readonly Move[];
  /**
   * Slot backends the configuration holds that belong in the storage's files (an install from before the
   * `storage` layout) move there in this write (with a reload, verified by the caller).
   */
  relocate?: boolean;
  /** Every backend goes into the configuration (the storage's files not loaded: `putBack`). */
  noSlots?: boolean;
}

export interface FilesDeps {
  client: DataplaneClient;
  /** The logical allow map by slot: each slot's own map's text. */
  allow: SlotAllowIndex;
  /** The owner's allow map, and where the storage keeps each slot's. */
  guards: SlotGuards;
  reads: ConfigReads;
  maps: MapFiles;
  workers: Workers;
  /** The slot backends' files, when they live in the API's general storage (`KUBEBYON_DATAPLANE_SLOTS`). */
  slots: SlotsFile | undefined;
  /** How tags are written, as the API version keeps them. */
  lines: () => LineTags;
  timeoutMs: number;
  reloadTimeoutMs: number;
  logger: Logger;
  /** A push of the file at `version` the API went away during: it may leave the transaction it opened. */
  interrupted?: (version: number) => void;
}

/** `X-Runtime-Actions` of one push stay well under the API's header limit. */
const ACTIONS_MAX_BYTES = 256 * 1024;

/**
 * The files HAProxy loads, written through the API: the map files, the slot backends' files (when they live
 * in the general storage), and the configuration file as text (`POST /configuration/raw?version=V`, the
 * sections of ours named replaced in the text read, every other line kept), with `force_reload` when what is
 * written must run now, else `skip_reload`. One request carries the whole configuration change, checked by
 * the API against the version read: no transaction to open, commit, or leave behind.
 */
export class Files {
  /** Each SNI map's text, kept between writes. */
  private readonly texts = new Map<string, MapText>();

  constructor(private readonly d: FilesDeps) {}

  /**
   * The SNI maps' text of `state` made now (the full pass), rather than by the first persistence while a
   * change waits (50 ms at 20000 clusters). An entry refused here is refused by the write that carries it.
   */
  prepare(state: HaproxyState): void {
    for (const f of state.frontends) {
      const entries = f.owned && f.sniMap ? state.maps?.find((m) => m.name === f.sniMap)?.entries : undefined;
      if (!entries || !f.sniMap) continue;
      try {
        this.sniText(f.sniMap).text(entries);
      } catch {
        // Left to the write.
      }
    }
  }

  /** One push of the configuration's text at `version` (the API opens a transaction for it: `interrupted`). */
  private async push(
    text: string,
    version: number,
    w: FileWrite,
    actions: string | undefined,
    signal: AbortSignal,
  ) {
    try {
      return await this.d.client.POST('/services/haproxy/configuration/raw', {
        params: { query: { version, ...(w.reload ? { force_reload: true } : { skip_reload: true }) } },
        body: text,
        ...(actions !== undefined ? { headers: { 'X-Runtime-Actions': actions } } : {}),
        ...(w.reload ? { timeoutMs: this.d.reloadTimeoutMs + this.d.timeoutMs } : {}),
        signal,
      });
    } catch (err) {
      if (err instanceof DataplaneUnreachableError) this.d.interrupted?.(version);
      throw err;
    }
  }

  /**
   * The slots' own allow maps of `target`'s owned guarded slots, by map name (the slot as the value); the
   * index brought to `target`'s logical allow map.
   */
  private slotMaps(target: HaproxyState): Map<string, string> {
    const out = new Map<string, string>();
    const allowMap = this.d.guards.allowMap;
    if (!target.frontends.some((f) => f.owned && f.edge?.allowMap === allowMap)) return out;
    this.d.allow.follow(target.maps?.find((m) => m.name === allowMap)?.entries ?? new Map());
    for (const b of target.backends)
      if (b.owned && b.allowMap && b.allowMap === slotAllowMapName(allowMap, b.name))
        out.set(b.allowMap, b.name);
    return out;
  }

  private sniText(name: string): MapText {
    const kept = this.texts.get(name);
    if (kept) return kept;
    const made = new MapText();
    this.texts.set(name, made);
    return made;
  }

  /** Writes `w`; resolves whether HAProxy was reloaded. */
  async write(w: FileWrite, signal: AbortSignal, counter: Counter): Promise<boolean> {
    const { target } = w;
    // Map files first: a configuration that routes by a map names its file, which must hold the entries.
    const contents = new Map<string, string | undefined>();
    for (const f of target.frontends)
      if (f.owned && w.frontends.has(f.name) && f.sniMap) contents.set(f.sniMap, undefined);
    const slotMaps = this.slotMaps(target);
    for (const name of w.maps) {
      const slot = slotMaps.get(name);
      const entries = target.maps?.find((m) => m.name === name)?.entries ?? new Map<string, string>();
      contents.set(name, slot !== undefined ? this.d.allow.text(slot) : this.sniText(name).text(entries));
    }
    const mapFile = new Map<string, string>();
    for (const [name, content] of contents)
      if (!slotMaps.has(name)) mapFile.set(name, await this.d.maps.write(name, content, signal, counter));
    // A slot's own allow map before the section that guards by it: the ones asked for, those of the slots a
    // reload writes (a new slot, a guard written for the first time), and any the storage does not hold.
    const slotWrites: Array<[string, string]> = [];
    if (!this.d.maps.folderKnown && slotMaps.size > 0) await this.d.maps.list(signal, counter);
    for (const [name, slot] of slotMaps)
      if (
        contents.has(name) ||
        (w.backends.has(slot) && (w.reload || !(await this.d.maps.find(name, signal, counter))))
      )
        slotWrites.push([name, this.d.allow.text(slot)]);
    await this.d.maps.writeMany(slotWrites, signal, counter);
    const config = await this.d.reads.read(signal, counter);
    const inConfig = new Set(config.state().backends.map((b) => b.name));
    const slots = this.d.slots && !w.noSlots ? this.d.slots : undefined;
    const named = namedBackends(target);
    const wanted = new Map<string, BackendState>();
    for (const b of target.backends) if (w.backends.has(b.name)) wanted.set(b.name, b);
    // A slot the configuration holds stays there until it is moved with a verified reload (`relocate`).
    const inFiles = (b: BackendState) =>
      slots !== undefined && b.owned && !named.has(b.name) && (w.relocate || !inConfig.has(b.name));
    const edits = new Map<string, readonly string[] | null>();
    if (slots) await this.slotFiles(w, slots, inFiles, wanted, inConfig, edits, signal, counter);
    const lines = this.d.lines();
    for (const name of w.frontends) {
      const f = target.frontends.find((x) => x.name === name);
      if (f && !f.owned) continue;
      const path = async (map: string | null | undefined) =>
        map ? (mapFile.get(map) ?? (await this.d.maps.find(map, signal, counter))) : undefined;
      const files = { sniMap: await path(f?.sniMap) };
      edits.set(sectionKey('frontend', name), f ? frontendLines(f, files, lines) : null);
    }
    for (const name of w.backends) {
      const b = wanted.get(name);
      if (b && (!b.owned || inFiles(b))) continue;
      edits.set(
        sectionKey('backend', name),
        b ? backendLines(withoutDraining(b, w.draining), lines, this.d.guards) : null,
      );
    }
    const text = spliceSections(config.text, edits);
    const moves = w.moves ?? [];
    // A reload loads what the map and slot files hold even when the configuration's text stays as it is.
    if (text === config.text && moves.length === 0 && !w.reload) return false;
    const before = w.reload ? await this.d.workers.settledWorkerPid(signal) : undefined;
    // Moves in place beyond one header's worth (a node moved under thousands of busy servers) go in several
    // pushes of the same text, each carrying its part of the actions.
    const parts = moves.length > 0 ? runtimeActions(moves) : [undefined];
    let version = config.version;
    for (const actions of parts) {
      counter.requests++;
      const pushed = await this.push(text, version, w, actions, signal);
      this.d.reads.wrote(versionOf(pushed.headers), text);
      version = versionOf(pushed.headers) ?? version + 1;
    }
    if (w.reload) await this.d.workers.awaitNewWorkers(before, counter);
    return w.reload;
  }

  /**
   * The slot backends' files (general storage): the backends of `target` that live there, written when any
   * of them is named; those the configuration still holds (an install from before, or `config` set back)
   * are taken out of it in the same write. A write that changes no frontend and reloads nothing (a
   * persistence, endpoint moves) renders and sends only the files of the backends named (`update`).
   */
  private async slotFiles(
    w: FileWrite,
    slots: SlotsFile,
    inFiles: (b: BackendState) => boolean,
    wanted: ReadonlyMap<string, BackendState>,
    inConfig: ReadonlySet<string>,
    edits: Map<string, readonly string[] | null>,
    signal: AbortSignal,
    counter: Counter,
  ): Promise<void> {
    if (!w.relocate && !w.reload && w.frontends.size === 0) {
      const backendOf = (name: string) => {
        const b = wanted.get(name);
        return b && inFiles(b) ? b : undefined;
      };
      if ((await slots.update(w.backends, backendOf, w.draining, signal, counter)) !== undefined) return;
    }
    const moving = w.target.backends.filter((b) => inConfig.has(b.name) && inFiles(b));
    for (const b of moving) edits.set(sectionKey('backend', b.name), null);
    const named = [...wanted.values()].some(inFiles) || [...w.backends].some((n) => slots.has(n));
    if (moving.length === 0 && !named) return;
    const backends = w.target.backends.filter(inFiles).map((b) => withoutDraining(b, w.draining));
    await slots.write(backends, 'skip', signal, counter);
  }
}

/**
 * `SetServerAddr <backend> <server> <address> <port>;…`: what HAProxy runs at once as the file is taken, in
 * headers of at most `ACTIONS_MAX_BYTES` each.
 */
function runtimeActions(moves: readonly Move[]): string[] {
  const parts: string[] = [];
  let part = '';
  for (const m of moves) {
    const action = `SetServerAddr ${checkedName(m.backend, 'backend')} ${checkedName(m.server.name, 'server')} ${checkedServerAddress(m.server.address)} ${checkedPort(m.server.port, 'server')}`;
    if (part !== '' && Buffer.byteLength(part) + 1 + Buffer.byteLength(action) > ACTIONS_MAX_BYTES) {
      parts.push(part);
      part = '';
    }
    part = part === '' ? action : `${part};${action}`;
  }
  if (part !== '') parts.push(part);
  return parts;
}

/**
 * Slot backends moved to the storage's files that HAProxy then did not load (it is not started with a second
 * `-f` naming the storage directory): out of the files first (written without a reload, so that a later
 * `-f` finds no name twice), then back into the configuration, reloaded.
 */
export async function putBack(
  files: Files,
  slots: SlotsFile,
  target: HaproxyState,
  names: ReadonlySet<string>,
  signal: AbortSignal,
  counter: Counter,
): Promise<void> {
  const rest = [...(slots.current?.values() ?? [])].filter((b) => !names.has(b.name));
  await slots.write(rest, 'skip', signal, counter);
  slots.forget();
  await files.write(
    {
      target,
      frontends: new Set(),
      backends: new Set(names),
      maps: new Set(),
      draining: new Set(),
      reload: true,
      noSlots: true,
    },
    signal,
    counter,
  );
}
