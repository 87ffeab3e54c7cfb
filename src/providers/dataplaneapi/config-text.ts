import { basename } from 'node:path';
import { parseAddress } from '../../haproxy/address.js';
import {
  edgeLines,
  isEdgeLine,
  isSlotGuardLine,
  REFUSALS_TABLE,
  readEdge,
  readSlotGuard,
  slotGuardLines,
} from '../../haproxy/edge.js';
import type {
  RawBackend,
  RawFrontend,
  RawRule,
  RawServer,
  RawState,
  ServerSpec,
  Tags,
} from '../../haproxy/model.js';
import { slotAllowMapName } from '../../haproxy/slot-allow.js';
import { isHaproxyName } from '../../naming/names.js';
import type { TagStore } from './capability.js';
import {
  checkedBindAddress,
  checkedHost,
  checkedName,
  checkedPort,
  checkedServerAddress,
} from './checked.js';
import { mapRuleFile, storageName } from './map-names.js';
import { checkedTags, descriptionToTags, metadataToTags, tagsToDescription, tagsToMetadata } from './tags.js';

/**
 * The configuration file as the Data Plane API stores it (`GET /configuration/raw`), as text: read into raw
 * state, and the service's sections rendered in the API's own form and put in place of (or beside) what is
 * there, every other line, foreign sections included, sent back byte for byte. Tags are written where the
 * API version keeps them (`capability.ts`): a JSON comment on the line (`metadata`, v3.2+), or a
 * `description` line first in the section (v3.0, v3.1); reads accept both. Pure.
 * (Over 300 lines: reading and writing the text are kept side by side, so that each form read is a form written.)
 */

/**
 * The slots' guards (authorized networks, `edge.ts`) in the API's terms: the owner's logical allow map (the
 * frontend's guard does not name it), and where the storage keeps a slot's own map (`slot-allow.ts`).
 */
export interface SlotGuards {
  readonly allowMap: string;
  /** The path of the stored map `name` (logical); throws when the storage's folder is not known yet. */
  path(name: string): string;
}

/** Lines the API writes at the top of the file for itself; it writes them again on every push. */
export const API_HEAD = /^# (_md5hash=|_version=|Dataplaneapi managed File|changing file directly)/;
const META = / # (\{.*\})\s*$/;
/** The name of the bind the service gives its frontend. */
export const BIND_NAME = 'kubebyon';
const DESCRIPTION_LINE = /^\s+description\s/;

/** Tags from a line's metadata comment; none when it has no comment the API wrote. */
function lineTags(line: string): Tags {
  const m = META.exec(line);
  if (!m?.[1]) return {};
  try {
    return metadataToTags(JSON.parse(m[1]));
  } catch {
    return {};
  }
}

/** A line's words without its metadata comment. */
function wordsOf(line: string): string[] {
  return line.replace(META, '').trim().split(/\s+/);
}

interface Section {
  kind: string;
  name: string;
  /** The header line first, then the body (trailing blank lines excluded). */
  lines: string[];
}

/** The frontend and backend sections of `text`, in order. */
function sectionsOf(text: string): Section[] {
  const out: Section[] = [];
  let current: Section | undefined;
  for (const line of text.split('\n')) {
    if (/^[^\s#]/.test(line)) {
      const [kind = '', name = ''] = wordsOf(line);
      current = kind === 'frontend' || kind === 'backend' ? { kind, name, lines: [line] } : undefined;
      if (current) out.push(current);
    } else if (current && line.trim() !== '') current.lines.push(line);
  }
  return out;
}

/** A section's tags: its header's comment, else its description line; and whether they are in the latter. */
function sectionTags(s: Section): { tags: Tags; byDescription: boolean } {
  const header = lineTags(s.lines[0] ?? '');
  if (Object.keys(header).length > 0) return { tags: header, byDescription: false };
  const line = s.lines.find((l) => DESCRIPTION_LINE.test(l));
  const tags = line ? descriptionToTags(wordsOf(line).slice(1).join(' ')) : {};
  return { tags, byDescription: Object.keys(tags).length > 0 };
}

/** HAProxy's time format (a number, with `us`, `ms`, `s`, `m`, `h` or `d`; ms without), in ms. */
function timeMs(text: string | undefined): number | null {
  const m = /^([0-9]+)(us|ms|s|m|h|d)?$/.exec(text ?? '');
  if (!m) return null;
  const unit = { us: 0.001, ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 }[m[2] ?? 'ms'] ?? 1;
  return Number(m[1]) * unit;
}

const HELLO = /^tcp-request content accept if \{ req[._]ssl_hello_type 1 \}$/;
const SNI_RULE = /^use_backend (\S+) if \{ req[._]ssl_sni -i (\S+) \}$/;

/**
 * The configuration's frontends and backends as raw state, with the tags stored with them. A frontend's bind
 * is the one named `kubebyon` (another tool may have added more), else the first; the map rule
 * (`use_backend %[req.ssl_sni,lower,map(<file>)]`) is read as `sniMap` (`mapName` turns its file into the
 * map's name). In a frontend tagged by its description (v3.0/v3.1 keep no tags on lines) a switching rule
 * carries the tags of the backend it routes to.
 */
export function readConfigText(text: string, mapName: (file: string) => string, allowMap: string): RawState {
  const sections = sectionsOf(text);
  const backendTags = new Map<string, Tags>();
  const backends: RawBackend[] = [];
  for (const s of sections) {
    if (s.kind !== 'backend') continue;
    const b = readBackend(s, allowMap);
    backendTags.set(b.name, b.tags);
    backends.push(b);
  }
  const frontends = sections
    .filter((s) => s.kind === 'frontend')
    .map((s) => readFrontend(s, (name) => backendTags.get(name) ?? {}, mapName, allowMap));
  return { frontends, backends };
}

function readFrontend(
  s: Section,
  backendTags: (name: string) => Tags,
  mapName: (file: string) => string,
  allowMap: string,
) {
  const { tags, byDescription } = sectionTags(s);
  const f: { -readonly [K in keyof RawFrontend]: RawFrontend[K] } & { rules: RawRule[] } = {
    name: s.name,
    bind: null,
    inspectDelayMs: null,
    acceptsTlsHello: false,
    defaultBackend: null,
    rules: [],
    tags,
  };
  let bindNamed = false;
  const edgeBody: string[] = [];
  for (const line of s.lines.slice(1)) {
    const words = wordsOf(line);
    const body = words.join(' ');
    const [kw, arg] = words;
    if (kw === 'bind' && !bindNamed) {
      const named = words[words.indexOf('name') + 1] === BIND_NAME && words.includes('name');
      const at = parseAddress(arg ?? '');
      if (f.bind === null || named)
        f.bind = at && words.includes('accept-proxy') ? { ...at, acceptProxy: true } : at;
      bindNamed = named;
    } else if (kw === 'tcp-request' && arg === 'inspect-delay') {
      f.inspectDelayMs = timeMs(words[2]);
      edgeBody.push(`tcp-request inspect-delay ${f.inspectDelayMs ?? words[2]}ms`);
    } else if (HELLO.test(body)) {
      f.acceptsTlsHello = true;
      edgeBody.push('tcp-request content accept if { req.ssl_hello_type 1 }');
    } else if (isEdgeLine(body)) edgeBody.push(body);
    else if (kw === 'default_backend') f.defaultBackend = arg ?? null;
    else if (kw === 'use_backend' && words.length === 2) {
      const file = mapRuleFile({ name: arg ?? '' });
      if (file !== undefined) f.sniMap = mapName(file);
    } else if (kw === 'use_backend') {
      const m = SNI_RULE.exec(body);
      const backend = m?.[1] ?? arg ?? '';
      const host = m?.[2] ?? words.slice(2).join(' ');
      const own = lineTags(line);
      f.rules.push({
        backend,
        host,
        tags: Object.keys(own).length > 0 || !byDescription ? own : backendTags(backend),
      });
    }
  }
  const edge = readEdge(edgeBody, allowMap).edge;
  if (edge) f.edge = edge;
  return f;
}

/**
 * A backend section; a slot's guard (`readSlotGuard`) is read as its allow map when it names the very file
 * the storage keeps that slot's map in (`slotAllowMapName` of the owner's `allowMap`).
 */
function readBackend(s: Section, allowMap: string): RawBackend {
  const servers: RawServer[] = [];
  let balance = '';
  let table: string | undefined;
  const guard: string[] = [];
  for (const line of s.lines.slice(1)) {
    const words = wordsOf(line);
    if (isSlotGuardLine(words.join(' '))) guard.push(words.join(' '));
    if (words[0] === 'balance') balance = words[1] ?? '';
    if (words[0] === 'stick-table') table = words.slice(1).join(' ');
    if (words[0] !== 'server') continue;
    const at = parseAddress(words[2] ?? '');
    if (!at || at.address === '*') continue;
    servers.push({
      name: words[1] ?? '',
      ...at,
      check: words.slice(3).includes('check'),
      tags: lineTags(line),
    });
  }
  const file = readSlotGuard(guard);
  const own = slotAllowMapName(allowMap, s.name);
  return {
    name: s.name,
    balance,
    servers,
    tags: sectionTags(s).tags,
    ...(table !== undefined ? { table: table === REFUSALS_TABLE ? table : `? ${table}` } : {}),
    ...(file !== undefined && basename(file) === storageName(own) ? { allowMap: own } : {}),
  };
}

/** How tags are written into lines, as the API version keeps them. */
export interface LineTags {
  /** Appended to a frontend's or backend's header line. */
  header(tags: Tags): string;
  /** The body lines that come first in a section (the description, where tags live there). */
  first(tags: Tags): string[];
  /** Appended to a bind, rule or content rule line. */
  child(tags: Tags): string;
  server(tags: Tags): string;
}

function comment(tags: Tags): string {
  if (Object.keys(tags).length === 0) return '';
  const meta = tagsToMetadata(checkedTags(tags));
  const sorted = Object.fromEntries(Object.entries(meta).sort(([a], [b]) => (a < b ? -1 : 1)));
  return ` # ${JSON.stringify(sorted)}`;
}

export function lineTagsFor(store: TagStore): LineTags {
  const none = () => '';
  if (store.ownership === 'metadata')
    return { header: comment, first: () => [], child: comment, server: comment };
  return {
    header: none,
    first: (tags) => [`  description ${tagsToDescription(tags)}`],
    child: none,
    server: store.serverTags ? comment : none,
  };
}

export function hostPort(address: string, port: number): string {
  const a = checkedServerAddress(address);
  return `${a.includes(':') ? `[${a}]` : a}:${checkedPort(port, 'server')}`;
}

export function serverLine(s: ServerSpec & { tags: Tags }, t: LineTags): string {
  return `  server ${checkedName(s.name, 'server')} ${hostPort(s.address, s.port)}${s.check ? ' check' : ''}${t.server(s.tags)}`;
}

/** Where the API's storage keeps the frontend's SNI map. */
export interface MapFilePaths {
  sniMap: string | undefined;
}

/** Our frontend's section, its maps at `files` (paths in the API's storage). */
export function frontendLines(f: RawFrontend, files: MapFilePaths, t: LineTags): string[] {
  const delay = f.inspectDelayMs;
  if (f.bind === null || delay === null || !Number.isInteger(delay) || delay < 0)
    throw new RangeError(`frontend ${f.name} without a bind or a valid inspect delay`);
  const own = t.child(f.tags);
  const address = checkedBindAddress(f.bind.address);
  const proxy = f.bind.acceptProxy ? ' accept-proxy' : '';
  const bind = `${address.includes(':') ? `[${address}]` : address}:${checkedPort(f.bind.port, 'bind')}`;
  const mapFile = files.sniMap;
  let body: string[];
  if (f.edge) {
    if (mapFile === undefined) throw new RangeError(`frontend ${f.name}: its guard needs its SNI map`);
    checkedName(f.edge.refusals, 'refusals backend');
    body = edgeLines(f.edge, delay, { sniMap: checkedMapFile(mapFile) }).map((l) => `  ${l}`);
  } else {
    // Never tagged: v3.2.15 doubles a comment on this line at every write of the file.
    body = [
      `  tcp-request inspect-delay ${delay}ms`,
      `  tcp-request content accept if { req.ssl_hello_type 1 }${own}`,
    ];
  }
  return [
    `frontend ${checkedName(f.name, 'frontend')}${t.header(f.tags)}`,
    ...t.first(f.tags),
    '  mode tcp',
    `  bind ${bind} name ${BIND_NAME}${proxy}${own}`,
    ...body,
    ...f.rules.map(
      (r) =>
        `  use_backend ${checkedName(r.backend, 'backend')} if { req.ssl_sni -i ${checkedHost(r.host)} }${t.child(r.tags)}`,
    ),
    ...(mapFile !== undefined ? [`  use_backend %[req.ssl_sni,lower,map(${checkedMapFile(mapFile)})]`] : []),
    ...(f.defaultBackend !== null ? [`  default_backend ${checkedName(f.defaultBackend, 'backend')}`] : []),
  ];
}

/** A backend's section; a slot's guard names its map where `guards` says the storage keeps it. */
export function backendLines(b: RawBackend, t: LineTags, guards?: SlotGuards): string[] {
  if (b.table) {
    // The refusals table (`edge.ts`) is the only table this service writes.
    if (b.table !== REFUSALS_TABLE) throw new RangeError(`refusing to write the table of backend ${b.name}`);
    return [
      `backend ${checkedName(b.name, 'backend')}${t.header(b.tags)}`,
      ...t.first(b.tags),
      '  mode tcp',
      `  stick-table ${b.table}`,
    ];
  }
  return [
    `backend ${checkedName(b.name, 'backend')}${t.header(b.tags)}`,
    ...t.first(b.tags),
    '  mode tcp',
    `  balance ${checkedName(b.balance, 'balance algorithm')}`,
    ...guardLines(b, guards),
    ...b.servers.map((s) => serverLine(s, t)),
  ];
}

function guardLines(b: RawBackend, guards: SlotGuards | undefined): string[] {
  if (!b.allowMap) return [];
  if (!guards) throw new RangeError(`backend ${b.name}: its guard needs the storage's folder`);
  return slotGuardLines(checkedMapFile(guards.path(b.allowMap))).map((l) => `  ${l}`);
}

function checkedMapFile(file: string): string {
  if (!/^\/[A-Za-z0-9_./-]+$/.test(file) || file.includes('..'))
    throw new RangeError(`refusing to write the map path ${JSON.stringify(file)}`);
  return file;
}

/** Sections to put in the text: by `kind name`, their lines (header first), or null to remove them. */
export type SectionEdits = ReadonlyMap<string, readonly string[] | null>;

export const sectionKey = (kind: 'frontend' | 'backend', name: string) => `${kind} ${name}`;

/**
 * `text` with the sections `edits` names replaced (or removed), and the ones it does not hold appended, in
 * the order given. Only those sections are found (one search of the text): the rest of the file, megabytes
 * at thousands of slots, is copied as it is. The API's own head lines are dropped (it writes them again).
 */
export function spliceSections(text: string, edits: SectionEdits): string {
  const body = text
    .split('\n')
    .filter((l, i) => i > 20 || !API_HEAD.test(l))
    .join('\n')
    .replace(/\n+$/, '');
  const out: string[] = [];
  const done = new Set<string>();
  let copied = 0;
  const names = [...edits.keys()].map((k) =>
    k.replace(/[.*+?^${}()|[\]\\]/g, '\\$&').replace(' ', '[ \\t]+'),
  );
  if (names.length > 0) {
    const named = new RegExp(`^(${names.join('|')})(?=[ \\t]|$)`, 'gm');
    for (const m of body.matchAll(named)) {
      const key = wordsOf(m[0]).slice(0, 2).join(' ');
      const next = /\n(?=[^\s#])/g;
      next.lastIndex = m.index + 1;
      const end = next.exec(body)?.index ?? body.length;
      out.push(body.slice(copied, m.index));
      const lines = edits.get(key);
      if (lines && !done.has(key)) {
        // The blank lines after the section stay; the newline before the next one too.
        const trailing = /\n*$/.exec(body.slice(m.index, end))?.[0] ?? '';
        out.push(`${lines.join('\n')}${trailing}`);
        copied = end;
      } else copied = end + 1;
      done.add(key);
    }
  }
  out.push(body.slice(copied));
  let result = out.join('').replace(/\n+$/, '');
  for (const [key, lines] of edits)
    if (lines && !done.has(key)) result += `${result === '' ? '' : '\n\n'}${lines.join('\n')}`;
  return result === '' ? '' : `${result}\n`;
}

/** Whether `name` may be written as a section name (for sections read back from a file by name). */
export function isSectionName(name: string): boolean {
  return isHaproxyName(name);
}
