import { readFile, rm } from 'node:fs/promises';
import { setImmediate } from 'node:timers/promises';
import type { SlotAllowIndex } from '../../haproxy/allow-file.js';
import type { RawBackend, RawMap, RawState } from '../../haproxy/model.js';
import { slotAllowMapName } from '../../haproxy/slot-allow.js';
import { errorText } from '../../model/errors.js';
import { isAllowOperation } from '../../plan/operations.js';
import type { Plan } from '../../plan/plan.js';
import { writeFileAtomic } from '../../store/atomic-file.js';
import { ALLOW_HEADER, mapPath, renderMapFile } from './map-file.js';
import { renderOwnedFile } from './owned-file.js';
import type { FileReading, OwnedFileCache } from './read.js';
import { mapDirOf, OWNED_FILE_MODE, type Session, writeOwnedFile } from './session.js';

/**
 * Persistence of what runs, off the critical path: a runtime apply changes the worker at once; the files
 * HAProxy loads (the owned file's servers, the SNI map file) follow, batched, without a reload, so that the
 * next reload or restart (ours or anyone's) comes back with every acknowledged route.
 */

/** The part of `state` that lives in the owned file (the sections it holds). */
export function fileStateOf(state: RawState, inFile: ReadonlySet<string>): RawState {
  return {
    frontends: state.frontends.filter((f) => inFile.has(f.name)),
    backends: state.backends.filter((b) => inFile.has(b.name)),
  };
}

async function readText(path: string): Promise<string | null> {
  try {
    return await readFile(path, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw err;
  }
}

/** Slots' allow maps written at once. */
const SLOT_WRITERS = 16;

/**
 * The slots' allow maps as this provider last wrote or found them on disk (path -> text): a persistence
 * compares with them rather than reading thousands of files again. Forgotten on every full read.
 */
export type SlotFilesSeen = Map<string, string>;

/**
 * Writes the map files of `fileState` where the file on disk differs: each owned frontend's SNI map, with the
 * entries `maps` gives (none: an empty map), and each slot's own allow map (`slot-allow.ts`), from the
 * logical allow map (`allow` follows it). Returns what undoes it: the previous contents put back.
 */
export async function writeMapFiles(
  s: Session,
  fileState: RawState,
  maps: readonly RawMap[] | undefined,
  allow: SlotAllowIndex,
  seen: SlotFilesSeen,
): Promise<() => Promise<void>> {
  const previous: Array<{ path: string; text: string }> = [];
  const write = async (path: string, text: string, before: string | null) => {
    if (before === text) return;
    await writeFileAtomic(path, text, OWNED_FILE_MODE);
    s.traffic?.bytes('sent', Buffer.byteLength(text));
    // A file that was not there is left: the previous owned file does not name it.
    if (before !== null) previous.push({ path, text: before });
  };
  const entriesOf = (name: string) =>
    maps?.find((m) => m.name === name)?.entries ?? new Map<string, string>();
  for (const name of new Set(fileState.frontends.flatMap((f) => (f.sniMap ? [f.sniMap] : [])))) {
    const path = mapPath(mapDirOf(s), name);
    await setImmediate();
    await write(path, renderMapFile(entriesOf(name)), await readText(path));
  }
  for (const name of new Set(fileState.frontends.flatMap((f) => (f.edge ? [f.edge.allowMap] : [])))) {
    allow.follow(entriesOf(name));
    const slots = fileState.backends.filter((b) => b.allowMap === slotAllowMapName(name, b.name));
    // Several at a time: each write syncs its file and folder, and syncs under way together share the
    // file system's journal commits (the pool growing to thousands of slots writes thousands of maps).
    let next = 0;
    const lane = async () => {
      while (next < slots.length) {
        const b = slots[next++] as RawBackend;
        const path = mapPath(mapDirOf(s), b.allowMap as string);
        const text = `${ALLOW_HEADER}\n${allow.text(b.name)}`;
        const before = seen.has(path) ? (seen.get(path) as string) : await readText(path);
        await write(path, text, before);
        seen.set(path, text);
      }
    };
    await Promise.all(Array.from({ length: Math.min(SLOT_WRITERS, slots.length) }, lane));
  }
  return async () => {
    for (const p of previous) {
      seen.delete(p.path);
      await writeFileAtomic(p.path, p.text, OWNED_FILE_MODE).catch((err) =>
        s.logger.warn({ err: errorText(err), path: p.path }, 'could not put the previous map file back'),
      );
    }
  };
}

/**
 * A list change's slot maps, written before it is acknowledged: only the slots its operations touch, from
 * the logical allow map `to` holds (`to` is `from` with `plan` applied: `allow` follows it from `from`). The
 * owned file and the SNI map are not touched: a list change changes neither.
 */
export async function writeAllowMaps(
  s: Session,
  plan: Plan,
  from: RawState,
  to: RawState,
  allow: SlotAllowIndex,
  seen: SlotFilesSeen,
): Promise<void> {
  const maps = allow.touchedMaps(plan.operations.filter(isAllowOperation), from, to);
  let next = 0;
  const lane = async () => {
    while (next < maps.length) {
      const { map, text: body } = maps[next++] as { map: string; text: string };
      const path = mapPath(mapDirOf(s), map);
      const text = `${ALLOW_HEADER}\n${body}`;
      await writeFileAtomic(path, text, OWNED_FILE_MODE);
      seen.set(path, text);
      s.traffic?.bytes('sent', Buffer.byteLength(text));
    }
  };
  await Promise.all(Array.from({ length: Math.min(SLOT_WRITERS, maps.length) }, lane));
}

/**
 * The one allow map of releases before per-slot maps (`<owner>.allow.map`), removed once HAProxy runs a file
 * that no longer names it: it is ours, and nothing reads it any more.
 */
export async function removeOldAllowMaps(s: Session, fileState: RawState): Promise<void> {
  for (const f of fileState.frontends)
    if (f.edge)
      await rm(mapPath(mapDirOf(s), f.edge.allowMap), { force: true }).catch((err) =>
        s.logger.warn({ err: errorText(err) }, 'could not remove the allow map of an older release'),
      );
}

/** What a persistence writes: the owned file's new text (null: it already holds it), then the map files. */
export interface PersistWrite {
  fileState: RawState;
  text: string | null;
}

/**
 * What to write so that the owned file and the map files hold what `reading` says runs: `changed` when the
 * owned file is no longer the one `reading` was taken with (it changed under us: nothing is written, the
 * caller reads again), `nothing` when nothing of ours runs. Reads and renders only; `writePersist` writes.
 */
export async function preparePersist(
  s: Session,
  owned: OwnedFileCache,
  reading: FileReading,
  defaultsName: string,
): Promise<PersistWrite | 'changed' | 'nothing'> {
  if (!reading.consistent) return 'changed';
  const { text: onDisk } = await owned.read();
  if (onDisk !== reading.text) return 'changed';
  const fileState = fileStateOf(reading.raw, reading.inFile);
  // Nothing of ours runs: nothing to keep (an empty owned file stays as the operator created it).
  if (fileState.frontends.length === 0 && fileState.backends.length === 0) return 'nothing';
  // Rendering thousands of sections takes tens of ms: webhooks waiting to be served go first.
  await setImmediate();
  const text = renderOwnedFile(fileState, defaultsName, mapDirOf(s));
  return { fileState, text: text === reading.text ? null : text };
}

/** Writes what `preparePersist` gave for `reading`; `reading.text` follows the owned file. */
export async function writePersist(
  s: Session,
  owned: OwnedFileCache,
  reading: FileReading,
  w: PersistWrite,
  allow: SlotAllowIndex,
  seen: SlotFilesSeen,
): Promise<void> {
  const started = Date.now();
  // The owned file first: a crash between the two leaves servers no entry names, never an entry that
  // names a slot without its servers.
  if (w.text !== null) {
    await writeOwnedFile(s, w.text);
    owned.remember(w.text, w.fileState);
    reading.text = w.text;
  } else owned.remember(reading.text, w.fileState);
  await writeMapFiles(s, w.fileState, reading.raw.maps, allow, seen);
  s.logger.debug({ ms: Date.now() - started }, 'runtime state persisted to the files HAProxy loads');
}
