import { createHash } from 'node:crypto';
import { isIP } from 'node:net';
import { edgeLines, edgeText, REFUSALS_TABLE, slotGuardLines } from '../../haproxy/edge.js';
import type { Bind, RawBackend, RawFrontend, RawServer, RawState, Tags } from '../../haproxy/model.js';
import { isHaproxyName } from '../../naming/names.js';
import { DEFAULT_OWNER_ID, TAG_KEY, TAG_VALUE } from '../../registry/registry.js';
import { mapPath, mapUseBackendLine } from './map-file.js';
import { HOST, UnsafeValueError } from './safe-values.js';

export { HOST, UnsafeValueError };

/**
 * The one configuration file the service owns, as text: rendered from raw objects (with their tags as a
 * trailing comment) and parsed back. Pure. Rendering refuses any value outside the charsets below instead of
 * writing it, so nothing can inject configuration even if a caller skipped validation.
 */

/** The named defaults every owned section inherits (`from`), so the operator's `defaults` never leak in. */
export const DEFAULTS_NAME = 'kubebyon_adapter';

/**
 * The defaults section's name for an owner. HAProxy refuses two `defaults` of one name that sections refer
 * to ("ambiguous defaults section name"), so each owner's file has its own; the default owner keeps the
 * name every earlier install wrote, so an upgrade leaves the file as it was.
 */
export function defaultsNameFor(ownerId: string): string {
  return ownerId === DEFAULT_OWNER_ID ? DEFAULTS_NAME : `${DEFAULTS_NAME}.${ownerId}`;
}
/** The first word of every tag comment the service writes (`# kubebyon owner=… cluster=…`). */
export const TAG_MARK = 'kubebyon';

/**
 * Timeouts for layer-4 passthrough of Kubernetes API traffic. Once `tcp-request content accept` has run, a
 * TCP session is a tunnel and only `timeout tunnel` applies: 4h matches the kubelet's default
 * streaming-connection-idle-timeout, so idle `watch`, `logs -f` and `exec` streams are not cut by HAProxy
 * before Kubernetes itself would cut them. client/server cover the time before that (the ClientHello is
 * bounded by the inspect delay).
 */
export const DEFAULTS_BODY = [
  'mode tcp',
  'log global',
  'option tcplog',
  'timeout connect 5s',
  'timeout client 30s',
  'timeout server 30s',
  'timeout tunnel 4h',
  'timeout client-fin 30s',
  'timeout server-fin 30s',
] as const;

export const BALANCE = new Set(['leastconn', 'roundrobin', 'source', 'static-rr', 'first']);
const GENERATION_BASE = 1_000_000_000;

function need(ok: boolean, what: string, value: unknown): void {
  if (!ok) throw new UnsafeValueError(`refusing to write ${what} ${JSON.stringify(value)} to the owned file`);
}

const name = (what: string, v: string) => need(isHaproxyName(v), what, v);
const port = (what: string, v: number) => need(Number.isInteger(v) && v >= 1 && v <= 65535, what, v);

function address(what: string, a: string, allowWildcard: boolean): string {
  if (allowWildcard && a === '*') return '*';
  const family = isIP(a);
  need(family !== 0, what, a);
  return family === 6 ? `[${a}]` : a;
}

function tagComment(tags: Tags): string {
  const entries = Object.entries(tags);
  if (entries.length === 0) return '';
  for (const [k, v] of entries) {
    need(TAG_KEY.test(k), 'tag key', k);
    need(TAG_VALUE.test(v), 'tag value', v);
  }
  return ` # ${TAG_MARK} ${entries.map(([k, v]) => `${k}=${v}`).join(' ')}`;
}

/**
 * A number that changes with the structure of the file (everything but the servers, which the runtime API
 * changes in place). Rendered as the first frontend's `id`, so `show stat` tells which structure HAProxy
 * runs. Kept in [1e9, 2e9): far above the ids HAProxy assigns by itself.
 */
export function generationOf(state: RawState): number {
  // Fixed key order: the same structure must hash alike whether rendered from a plan or parsed from disk.
  const tags = (t: Tags) => Object.entries(t).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  const f = byNameSorted(state.frontends).map((f) => [
    f.name,
    f.bind && [f.bind.address, f.bind.port],
    f.inspectDelayMs,
    f.acceptsTlsHello,
    f.defaultBackend,
    f.rules.map((r) => [r.backend, r.host, tags(r.tags)]),
    tags(f.tags),
    // Only when set: files written before map routing, or before the guard, keep their generation.
    ...(f.sniMap ? [f.sniMap] : []),
    ...(f.edge ? [edgeText(f.edge)] : []),
    ...(f.bind?.acceptProxy ? ['accept-proxy'] : []),
  ]);
  // The text of JSON.stringify({ f, b }) fed in parts (so every file written before hashes alike), each
  // backend's part kept with the backend: a persistence of thousands of slots hashes only what changed.
  const pieces = byNameSorted(state.backends).map((b) => {
    let piece = generationPieces.get(b);
    if (piece === undefined) {
      piece = JSON.stringify([
        b.name,
        b.balance,
        tags(b.tags),
        ...(b.table ? [b.table] : []),
        ...(b.allowMap ? [b.allowMap] : []),
      ]);
      generationPieces.set(b, piece);
    }
    return piece;
  });
  const head = JSON.stringify(f);
  // A persistence after runtime changes renders the same structure again: megabytes not hashed again.
  const last = lastGeneration;
  if (last && last.head === head && samePieces(last.pieces, pieces)) return last.generation;
  const digest = createHash('sha256')
    .update(`{"f":${head},"b":[${pieces.join(',')}]}`)
    .digest();
  const generation = GENERATION_BASE + (digest.readUInt32BE(0) % GENERATION_BASE);
  lastGeneration = { head, pieces, generation };
  return generation;
}

/** The last generation computed, with what it was computed from (compared in full: a cache, not a guess). */
let lastGeneration: { head: string; pieces: readonly string[]; generation: number } | undefined;

function samePieces(a: readonly string[], b: readonly string[]): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

// Raw objects are never changed in place once built (applyOperations copies on write), so what is derived
// from one can be kept with it.
const generationPieces = new WeakMap<RawBackend, string>();
const renderedBackends = new WeakMap<
  RawBackend,
  { defaultsName: string; mapDir: string | undefined; servers: readonly RawServer[]; text: string }
>();

/** `items` by name: the list itself when it already is (a read or a plan keeps them in order). */
function byNameSorted<T extends { name: string }>(items: readonly T[]): readonly T[] {
  for (let i = 1; i < items.length; i++)
    if (byName(items[i - 1] as T, items[i] as T) > 0) return [...items].sort(byName);
  return items;
}

/** The frontend whose `id` carries the generation: the first by name, as `renderOwnedFile` writes them. */
export function generationCarrier(state: RawState): string | null {
  return [...state.frontends].sort(byName)[0]?.name ?? null;
}

function byName<T extends { name: string }>(a: T, b: T): number {
  return a.name < b.name ? -1 : a.name > b.name ? 1 : 0;
}

function slotOrder(a: RawServer, b: RawServer): number {
  const n = (s: RawServer) => {
    const m = /^srv([0-9]+)$/.exec(s.name);
    return m ? Number(m[1]) : Number.MAX_SAFE_INTEGER;
  };
  return n(a) - n(b) || byName(a, b);
}

function bindLine(bind: Bind): string {
  port('bind port', bind.port);
  return `bind ${address('bind address', bind.address, true)}:${bind.port}${bind.acceptProxy ? ' accept-proxy' : ''}`;
}

function renderFrontend(
  f: RawFrontend,
  generation: number | null,
  defaultsName: string,
  mapDir: string | undefined,
): string[] {
  name('frontend name', f.name);
  need(f.bind !== null, 'frontend without bind', f.name);
  const lines = [`frontend ${f.name} from ${defaultsName}${tagComment(f.tags)}`];
  if (generation !== null) lines.push(`  id ${generation}`);
  lines.push('  mode tcp', `  ${bindLine(f.bind as Bind)}`);
  if (f.edge) {
    need(
      f.inspectDelayMs !== null && f.sniMap !== undefined && f.sniMap !== null,
      'guard without a map',
      f.name,
    );
    need(mapDir !== undefined, 'guard without a folder', f.name);
    name('refusals backend', f.edge.refusals);
    const files = { sniMap: mapPath(mapDir as string, f.sniMap as string) };
    for (const l of edgeLines(f.edge, f.inspectDelayMs as number, files)) lines.push(`  ${l}`);
  } else {
    if (f.inspectDelayMs !== null) {
      need(Number.isInteger(f.inspectDelayMs) && f.inspectDelayMs >= 0, 'inspect delay', f.inspectDelayMs);
      lines.push(`  tcp-request inspect-delay ${f.inspectDelayMs}ms`);
    }
    if (f.acceptsTlsHello) lines.push('  tcp-request content accept if { req.ssl_hello_type 1 }');
  }
  for (const r of f.rules) {
    name('backend name', r.backend);
    need(HOST.test(r.host), 'host', r.host);
    lines.push(`  use_backend ${r.backend} if { req.ssl_sni -i ${r.host} }${tagComment(r.tags)}`);
  }
  if (f.sniMap) {
    need(mapDir !== undefined, 'SNI map without a folder', f.sniMap);
    lines.push(`  ${mapUseBackendLine(mapPath(mapDir as string, f.sniMap))}`);
  }
  if (f.defaultBackend !== null) {
    name('default backend', f.defaultBackend);
    lines.push(`  default_backend ${f.defaultBackend}`);
  }
  return lines;
}

/** A backend's section, kept with the backend (and its servers' list) it was rendered from. */
function renderBackendText(b: RawBackend, defaultsName: string, mapDir: string | undefined): string {
  const kept = renderedBackends.get(b);
  if (kept && kept.defaultsName === defaultsName && kept.mapDir === mapDir && kept.servers === b.servers)
    return kept.text;
  const text = renderBackend(b, defaultsName, mapDir).join('\n');
  renderedBackends.set(b, { defaultsName, mapDir, servers: b.servers, text });
  return text;
}

function renderBackend(b: RawBackend, defaultsName: string, mapDir: string | undefined): string[] {
  name('backend name', b.name);
  const lines = [`backend ${b.name} from ${defaultsName}${tagComment(b.tags)}`, '  mode tcp'];
  if (b.table) {
    // The refusals table (`edge.ts`): a backend that only holds it.
    need(b.table === REFUSALS_TABLE && b.servers.length === 0, 'table backend', b.name);
    lines.push(`  stick-table ${b.table}`);
    return lines;
  }
  need(BALANCE.has(b.balance), 'balance algorithm', b.balance);
  lines.push(`  balance ${b.balance}`);
  if (b.allowMap) {
    need(mapDir !== undefined, 'slot guard without a folder', b.name);
    for (const l of slotGuardLines(mapPath(mapDir as string, b.allowMap))) lines.push(`  ${l}`);
  }
  const seen = new Set<string>();
  for (const s of [...b.servers].sort(slotOrder)) {
    name('server name', s.name);
    need(!seen.has(s.name), 'duplicate server', s.name);
    seen.add(s.name);
    port('server port', s.port);
    const addr = address('server address', s.address, false);
    lines.push(`  server ${s.name} ${addr}:${s.port}${s.check ? ' check' : ''}${tagComment(s.tags)}`);
  }
  return lines;
}

const HEADER = [
  '# Managed by kubebyon-haproxy-adapter: every change replaces this whole file, so edits here are lost.',
  '# HAProxy loads it with -f after the operator-owned files.',
];

/**
 * The owned file for `state` (the objects that live in it: ours, and foreign rules/servers inside them); a
 * frontend's SNI map is the file `<mapDir>/<sniMap>` (the owned file's folder).
 */
export function renderOwnedFile(state: RawState, defaultsName = DEFAULTS_NAME, mapDir?: string): string {
  need(isHaproxyName(defaultsName), 'defaults name', defaultsName);
  const frontends = byNameSorted(state.frontends);
  const backends = byNameSorted(state.backends);
  refuseDuplicateNames(frontends, backends);
  if (frontends.length === 0 && backends.length === 0) return `${HEADER.join('\n')}\n`;
  const generation = generationOf(state);
  // One section a string (a backend's is kept with it): thousands of slots cost no array each.
  const sections = [[`defaults ${defaultsName}`, ...DEFAULTS_BODY.map((l) => `  ${l}`)].join('\n')];
  frontends.forEach((f, i) => {
    sections.push(renderFrontend(f, i === 0 ? generation : null, defaultsName, mapDir).join('\n'));
  });
  for (const b of backends) sections.push(renderBackendText(b, defaultsName, mapDir));
  return `${HEADER.join('\n')}\n\n${sections.join('\n\n')}\n`;
}

/**
 * Frontends and backends share one namespace: the first name met twice (frontends first, each list by name)
 * is refused. The lists are sorted, so a backend's twin is its neighbour or a frontend (no set of every name).
 */
function refuseDuplicateNames(frontends: readonly RawFrontend[], backends: readonly RawBackend[]): void {
  const names = new Set<string>();
  for (const f of frontends) {
    need(!names.has(f.name), 'duplicate proxy name', f.name);
    names.add(f.name);
  }
  backends.forEach((b, i) => {
    need(!names.has(b.name) && backends[i - 1]?.name !== b.name, 'duplicate proxy name', b.name);
  });
}
