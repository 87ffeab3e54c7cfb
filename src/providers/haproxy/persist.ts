import { readFile } from 'node:fs/promises';
import { setImmediate } from 'node:timers/promises';
import type { AllowFileText } from '../../haproxy/allow-file.js';
import type { RawMap, RawState } from '../../haproxy/model.js';
import { errorText } from '../../model/errors.js';
import { isAllowOperation } from '../../plan/operations.js';
import type { Plan } from '../../plan/plan.js';
import { writeFileAtomic } from '../../store/atomic-file.js';
import { ALLOW_HEADER, mapPath, mapsOf, renderMapFile } from './map-file.js';
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

/**
 * Writes the map files of every owned frontend (its SNI map, its allow map), with the entries `maps` gives (none: an
 * empty map), where the file on disk differs. Returns what undoes it: the previous contents put back.
 */
export async function writeMapFiles(
  s: Session,
  fileState: RawState,
  maps: readonly RawMap[] | undefined,
  allow: AllowFileText,
): Promise<() => Promise<void>> {
  const previous: Array<{ path: string; text: string }> = [];
  const allowMaps = new Set(fileState.frontends.map((f) => f.edge?.allowMap));
  for (const name of new Set(fileState.frontends.flatMap(mapsOf))) {
    const path = mapPath(mapDirOf(s), name);
    await setImmediate();
    const entries = maps?.find((m) => m.name === name)?.entries ?? new Map<string, string>();
    const text = allowMaps.has(name) ? `${ALLOW_HEADER}\n${allow.text(entries)}` : renderMapFile(entries);
    const before = await readText(path);
    if (before === text) continue;
    await writeFileAtomic(path, text, OWNED_FILE_MODE);
    s.traffic?.bytes('sent', Buffer.byteLength(text));
    // A file that was not there is left: the previous owned file does not name it.
    if (before !== null) previous.push({ path, text: before });
  }
  return async () => {
    for (const p of previous)
      await writeFileAtomic(p.path, p.text, OWNED_FILE_MODE).catch((err) =>
        s.logger.warn({ err: errorText(err), path: p.path }, 'could not put the previous map file back'),
      );
  };
}

const HEADER_LINE = Buffer.from(`${ALLOW_HEADER}\n`, 'utf8');

/**
 * A list change's allow maps, written before it is acknowledged: only the maps its operations name, and of
 * those only the slots they touch rendered again (`AllowFileText`), since `to` is `from` with `plan` applied.
 * The owned file and the SNI map are not touched: a list change changes neither.
 */
export async function writeAllowMaps(
  s: Session,
  plan: Plan,
  from: RawState,
  to: RawState,
  allow: AllowFileText,
): Promise<void> {
  // Appended in place: a copy per operation made lists on all 5000 clusters (85 000 keys) spend 51 s here.
  const byMap = new Map<string, string[]>();
  for (const op of plan.operations) {
    if (!isAllowOperation(op)) continue;
    const keys = byMap.get(op.map);
    if (keys) keys.push(op.key);
    else byMap.set(op.map, [op.key]);
  }
  for (const [name, keys] of byMap) {
    const entries = to.maps?.find((m) => m.name === name)?.entries ?? new Map<string, string>();
    const before = from.maps?.find((m) => m.name === name)?.entries;
    const chunks = [HEADER_LINE, ...allow.chunks(entries, before ? { from: before, keys } : undefined)];
    await writeFileAtomic(mapPath(mapDirOf(s), name), chunks, OWNED_FILE_MODE);
    s.traffic?.bytes(
      'sent',
      chunks.reduce((n, c) => n + c.length, 0),
    );
  }
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
  allow: AllowFileText,
): Promise<void> {
  const started = Date.now();
  // The owned file first: a crash between the two leaves servers no entry names, never an entry that
  // names a slot without its servers.
  if (w.text !== null) {
    await writeOwnedFile(s, w.text);
    owned.remember(w.text, w.fileState);
    reading.text = w.text;
  } else owned.remember(reading.text, w.fileState);
  await writeMapFiles(s, w.fileState, reading.raw.maps, allow);
  s.logger.debug({ ms: Date.now() - started }, 'runtime state persisted to the files HAProxy loads');
}
