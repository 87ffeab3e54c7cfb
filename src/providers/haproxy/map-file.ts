import { basename, dirname, isAbsolute, join } from 'node:path';
import { ALLOW_VALUE, isAllowKey, isAllowNetwork } from '../../haproxy/allow-keys.js';
import { DENIED, DENY_VALUE } from '../../haproxy/slot-allow.js';
import { isHaproxyName } from '../../naming/names.js';
import { RuntimeAnswerError } from './runtime-text.js';
import { HOST, UnsafeValueError } from './safe-values.js';

/**
 * The SNI map of map routing on a stock HAProxy: a file beside the owned file, named by the frontend's
 * `sniMap`, holding `<host> <backend>` lines; the runtime API changes what the worker runs (`add/set/del
 * map`), and the file is rewritten after. Pure. Nothing unvalidated reaches the file or a runtime command:
 * keys are lower-case hosts (the frontend looks up `req.ssl_sni,lower`), values HAProxy names.
 */

/** A map's name: a plain file name (no folder, no leading dot), nothing HAProxy's parser would split. */
export const MAP_NAME = /^[A-Za-z0-9_-][A-Za-z0-9._-]{0,199}$/;
/** The owned file's folder, as it appears inside `map(<path>)`: an absolute path without odd characters. */
const MAP_DIR = /^\/[A-Za-z0-9._/-]{0,1000}$/;
const MAP_KEY = /^[a-z0-9.-]{1,253}$/;

export function isMapName(name: string): boolean {
  return MAP_NAME.test(name) && name !== '.' && name !== '..';
}

export function isMapKey(host: string): boolean {
  return MAP_KEY.test(host) && HOST.test(host);
}

/**
 * An entry this service writes: an SNI map's `<host> <backend>`, or a slot's allow map's `<network> 1` and
 * its refusals (`slot-allow.ts`; a logical allow key too, as older releases wrote them).
 */
export function isMapEntry(key: string, value: string): boolean {
  return (
    (isMapKey(key) && isHaproxyName(value)) ||
    ((isAllowNetwork(key) || isAllowKey(key)) && value === ALLOW_VALUE) ||
    (DENIED.includes(key) && value === DENY_VALUE)
  );
}

function need(ok: boolean, what: string, value: unknown): void {
  if (!ok) throw new UnsafeValueError(`refusing to write ${what} ${JSON.stringify(value)} to HAProxy`);
}

/** The path of map `name` in `dir` (the owned file's folder). */
export function mapPath(dir: string, name: string): string {
  need(isAbsolute(dir) && MAP_DIR.test(dir), 'map folder', dir);
  need(isMapName(name), 'map name', name);
  return join(dir, name);
}

/** The map's name from a path in `dir`, or null when the path is not a safe map of that folder. */
export function mapNameOf(dir: string, path: string): string | null {
  if (dirname(path) !== dir) return null;
  const name = basename(path);
  return isMapName(name) && join(dir, name) === path ? name : null;
}

/** The frontend line that routes by the map (after any rules). */
export function mapUseBackendLine(path: string): string {
  return `use_backend %[req.ssl_sni,lower,map(${path})]`;
}

export const MAP_USE_BACKEND = /^use_backend %\[req\.ssl_sni,lower,map\((\S+)\)\]$/;

/** A slot's allow map's first line (authorized networks; its lines are `slotMapText`'s). */
export const ALLOW_HEADER =
  '# Managed by kubebyon-haproxy-adapter (authorized networks of one slot: <network> 1): rewritten after every change, edits are lost.';

const MAP_HEADER =
  '# Managed by kubebyon-haproxy-adapter (SNI host -> backend): rewritten after every change, edits are lost.';

/** The map file for `entries`, sorted by host so that the same entries always give the same bytes. */
export function renderMapFile(entries: ReadonlyMap<string, string>): string {
  const hosts = [...entries.keys()].sort();
  const lines = [MAP_HEADER];
  for (const host of hosts) {
    const backend = entries.get(host) as string;
    need(isMapEntry(host, backend), 'map entry', `${host} ${backend}`);
    lines.push(`${host} ${backend}`);
  }
  return `${lines.join('\n')}\n`;
}

/** Reads back a map file (comments and blank lines skipped); a line it would not write is an error. */
export function parseMapFile(text: string): Map<string, string> {
  const entries = new Map<string, string>();
  text.split('\n').forEach((raw, i) => {
    const line = raw.trim();
    if (line === '' || line.startsWith('#')) return;
    const [key, value, ...rest] = line.split(/\s+/);
    if (rest.length > 0 || !isMapEntry(key ?? '', value ?? ''))
      throw new RuntimeAnswerError(`map file line ${i + 1}: ${JSON.stringify(line.slice(0, 200))}`);
    entries.set(key as string, value as string);
  });
  return entries;
}

/**
 * The command reading a map: `show map` followed by `show version` on the same connection, so that an
 * empty map (an empty answer) is told from a connection a reloading master closed unread.
 */
export function showMapCommand(path: string): string {
  return `@1 show map ${path};@1 show version`;
}

const ENTRY = /^0x[0-9a-fA-F]+\s+(\S+)\s+(\S+)\s*$/;
const VERSION = /^[0-9]+\.[0-9]+\S*$/;

/** Slots' maps read per master-CLI line: about 100 bytes each, well inside HAProxy's 16 kB buffer. */
const SHOW_LINE_BYTES = 8_000;

/**
 * The lines reading many maps (the slots' allow maps): `show map <file>;show version` for each, so that each
 * map's answer ends at a version line, an empty map included.
 */
export function showMapsCommands(paths: readonly string[]): string[][] {
  const lines: string[][] = [];
  let line: string[] = [];
  let bytes = 0;
  for (const path of paths) {
    const command = `@1 show map ${path};@1 show version`;
    if (line.length > 0 && bytes + command.length + 1 > SHOW_LINE_BYTES) {
      lines.push(line);
      line = [];
      bytes = 0;
    }
    line.push(command);
    bytes += command.length + 1;
  }
  if (line.length > 0) lines.push(line);
  return lines;
}

/** The answer to one line of `showMapsCommands`: each map's entries, in order; `count` maps or an error. */
export function parseShowMaps(text: string, count: number): Array<Map<string, string>> {
  const out: Array<Map<string, string>> = [];
  let entries = new Map<string, string>();
  for (const raw of text.split('\n')) {
    const line = raw.trim();
    if (line === '') continue;
    const m = ENTRY.exec(line);
    if (m) {
      if (!entries.has(m[1] as string)) entries.set(m[1] as string, m[2] as string);
    } else if (VERSION.test(line)) {
      out.push(entries);
      entries = new Map();
    } else
      throw new RuntimeAnswerError(`unexpected answer to show map: ${JSON.stringify(line.slice(0, 200))}`);
  }
  if (out.length !== count || entries.size > 0)
    throw new RuntimeAnswerError(`${count} maps read, ${out.length} answered`);
  return out;
}

/**
 * The answer to `showMapCommand`: `0x<ref> <key> <value>` lines, then the version. Keys HAProxy runs that
 * this service would never write (added by hand) are kept as they are: the planner deletes what it does not
 * want, and a delete names the key as HAProxy has it.
 */
export function parseShowMap(text: string): Map<string, string> {
  const lines = text.split('\n').map((l) => l.trim());
  while (lines.length > 0 && lines[lines.length - 1] === '') lines.pop();
  const version = lines.pop();
  if (version === undefined || !/^[0-9]+\.[0-9]+/.test(version))
    throw new RuntimeAnswerError(`incomplete answer to show map: ${JSON.stringify(text.slice(-200))}`);
  const entries = new Map<string, string>();
  for (const line of lines) {
    if (line === '') continue;
    const m = ENTRY.exec(line);
    if (!m)
      throw new RuntimeAnswerError(`unexpected answer to show map: ${JSON.stringify(line.slice(0, 200))}`);
    // Duplicate keys (an `add map` of a key that was there): HAProxy uses the first.
    if (!entries.has(m[1] as string)) entries.set(m[1] as string, m[2] as string);
  }
  return entries;
}

/** Runtime map commands on the current worker; each answers nothing when it worked. */
export const mapRuntime = {
  add: (path: string, host: string, backend: string) => mapCommand('add', path, host, backend),
  set: (path: string, host: string, backend: string) => mapCommand('set', path, host, backend),
  del: (path: string, host: string) => mapCommand('del', path, host),
};

function mapCommand(verb: 'add' | 'set' | 'del', path: string, host: string, backend?: string) {
  // A key read back from HAProxy may be anything a hand put there; deleting it must still be safe to send.
  need(/^[\x21-\x7e]{1,253}$/.test(host) && !/[;#\\'"]/.test(host), 'map key', host);
  if (backend !== undefined) need(isMapEntry(host, backend), 'map entry', `${host} ${backend}`);
  return {
    command: `@1 ${verb} map ${path} ${host}${backend === undefined ? '' : ` ${backend}`}`,
    ok: /^\s*$/,
  };
}
