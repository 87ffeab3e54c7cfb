import { createHash } from 'node:crypto';
import { isIP } from 'node:net';
import type {
  Bind,
  RawBackend,
  RawFrontend,
  RawRule,
  RawServer,
  RawState,
  Tags,
} from '../../haproxy/model.js';
import { isHaproxyName } from '../../naming/names.js';
import { DEFAULT_OWNER_ID, TAG_KEY, TAG_VALUE } from '../../registry/registry.js';

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
const TAG_MARK = 'kubebyon';

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

const HOST = /^[A-Za-z0-9.-]{1,253}$/;
const BALANCE = new Set(['leastconn', 'roundrobin', 'source', 'static-rr', 'first']);
const GENERATION_BASE = 1_000_000_000;

export class UnsafeValueError extends Error {
  override readonly name = 'UnsafeValueError';
}

export class OwnedFileParseError extends Error {
  override readonly name = 'OwnedFileParseError';
}

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
  const structure = {
    f: [...state.frontends]
      .sort(byName)
      .map((f) => [
        f.name,
        f.bind && [f.bind.address, f.bind.port],
        f.inspectDelayMs,
        f.acceptsTlsHello,
        f.defaultBackend,
        f.rules.map((r) => [r.backend, r.host, tags(r.tags)]),
        tags(f.tags),
      ]),
    b: [...state.backends].sort(byName).map((b) => [b.name, b.balance, tags(b.tags)]),
  };
  const digest = createHash('sha256').update(JSON.stringify(structure)).digest();
  return GENERATION_BASE + (digest.readUInt32BE(0) % GENERATION_BASE);
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
  return `bind ${address('bind address', bind.address, true)}:${bind.port}`;
}

function renderFrontend(f: RawFrontend, generation: number | null, defaultsName: string): string[] {
  name('frontend name', f.name);
  need(f.bind !== null, 'frontend without bind', f.name);
  const lines = [`frontend ${f.name} from ${defaultsName}${tagComment(f.tags)}`];
  if (generation !== null) lines.push(`  id ${generation}`);
  lines.push('  mode tcp', `  ${bindLine(f.bind as Bind)}`);
  if (f.inspectDelayMs !== null) {
    need(Number.isInteger(f.inspectDelayMs) && f.inspectDelayMs >= 0, 'inspect delay', f.inspectDelayMs);
    lines.push(`  tcp-request inspect-delay ${f.inspectDelayMs}ms`);
  }
  if (f.acceptsTlsHello) lines.push('  tcp-request content accept if { req.ssl_hello_type 1 }');
  for (const r of f.rules) {
    name('backend name', r.backend);
    need(HOST.test(r.host), 'host', r.host);
    lines.push(`  use_backend ${r.backend} if { req.ssl_sni -i ${r.host} }${tagComment(r.tags)}`);
  }
  if (f.defaultBackend !== null) {
    name('default backend', f.defaultBackend);
    lines.push(`  default_backend ${f.defaultBackend}`);
  }
  return lines;
}

function renderBackend(b: RawBackend, defaultsName: string): string[] {
  name('backend name', b.name);
  need(BALANCE.has(b.balance), 'balance algorithm', b.balance);
  const lines = [
    `backend ${b.name} from ${defaultsName}${tagComment(b.tags)}`,
    '  mode tcp',
    `  balance ${b.balance}`,
  ];
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

/** The owned file for `state` (the objects that live in it: ours, and foreign rules/servers inside them). */
export function renderOwnedFile(state: RawState, defaultsName = DEFAULTS_NAME): string {
  need(isHaproxyName(defaultsName), 'defaults name', defaultsName);
  const frontends = [...state.frontends].sort(byName);
  const backends = [...state.backends].sort(byName);
  const names = new Set<string>();
  for (const p of [...frontends, ...backends]) {
    need(!names.has(p.name), 'duplicate proxy name', p.name);
    names.add(p.name);
  }
  if (frontends.length === 0 && backends.length === 0) return `${HEADER.join('\n')}\n`;
  const generation = generationOf(state);
  const sections = [
    [`defaults ${defaultsName}`, ...DEFAULTS_BODY.map((l) => `  ${l}`)],
    ...frontends.map((f, i) => renderFrontend(f, i === 0 ? generation : null, defaultsName)),
    ...backends.map((b) => renderBackend(b, defaultsName)),
  ];
  return `${HEADER.join('\n')}\n\n${sections.map((s) => s.join('\n')).join('\n\n')}\n`;
}

export interface ParsedOwnedFile {
  state: RawState;
  /** The `id` the first frontend carries, if any (what the file says HAProxy should run). */
  generation: number | null;
}

function parseTags(comment: string | undefined, lineNo: number): Tags {
  if (comment === undefined) return {};
  const words = comment.trim().split(/\s+/);
  if (words[0] !== TAG_MARK) return {};
  const tags: Record<string, string> = {};
  for (const w of words.slice(1)) {
    const eq = w.indexOf('=');
    const k = w.slice(0, eq);
    const v = w.slice(eq + 1);
    if (eq < 1 || !TAG_KEY.test(k) || !TAG_VALUE.test(v))
      throw new OwnedFileParseError(`line ${lineNo}: bad tag ${w}`);
    tags[k] = v;
  }
  return tags;
}

function parseAddress(text: string): { address: string; port: number } | null {
  const m = /^(?:\[([0-9A-Fa-f:.]+)\]|([0-9.]+|\*)):([0-9]{1,5})$/.exec(text);
  if (!m) return null;
  const a = m[1] ?? m[2] ?? '';
  const p = Number(m[3]);
  if (p < 1 || p > 65535 || (a !== '*' && isIP(a) === 0)) return null;
  return { address: a, port: p };
}

/**
 * Reads back a file `renderOwnedFile` wrote. Anything it did not write is refused with its line number:
 * the service never guesses at configuration it does not understand.
 */
export function parseOwnedFile(text: string, defaultsName = DEFAULTS_NAME): ParsedOwnedFile {
  const frontends: RawFrontend[] = [];
  const backends: RawBackend[] = [];
  let generation: number | null = null;
  let section:
    | { kind: 'defaults' }
    | { kind: 'frontend'; f: RawFrontend }
    | { kind: 'backend'; b: RawBackend }
    | null = null;
  const lines = text.split('\n');
  for (let i = 0; i < lines.length; i++) {
    const lineNo = i + 1;
    const raw = lines[i] ?? '';
    const hash = raw.indexOf('#');
    const body = (hash >= 0 ? raw.slice(0, hash) : raw).trim();
    const comment = hash >= 0 ? raw.slice(hash + 1) : undefined;
    if (body === '') continue;
    const fail = (why: string): never => {
      throw new OwnedFileParseError(`line ${lineNo}: ${why}: ${JSON.stringify(body)}`);
    };
    const words = body.split(/\s+/);
    const [kw, arg] = words;
    if (kw === 'defaults') {
      if (arg !== defaultsName || words.length !== 2) fail('unexpected defaults section');
      section = { kind: 'defaults' };
    } else if (kw === 'frontend' || kw === 'backend') {
      if (words.length !== 4 || words[2] !== 'from' || words[3] !== defaultsName || !isHaproxyName(arg ?? ''))
        fail(`unexpected ${kw} line`);
      const tags = parseTags(comment, lineNo);
      if (kw === 'frontend') {
        const f: RawFrontend = {
          name: arg as string,
          bind: null,
          inspectDelayMs: null,
          acceptsTlsHello: false,
          defaultBackend: null,
          rules: [],
          tags,
        };
        frontends.push(f);
        section = { kind: 'frontend', f };
      } else {
        const b: RawBackend = { name: arg as string, balance: '', servers: [], tags };
        backends.push(b);
        section = { kind: 'backend', b };
      }
    } else if (section === null) {
      fail('directive outside a section');
    } else if (section.kind === 'defaults') {
      if (!(DEFAULTS_BODY as readonly string[]).includes(words.join(' ')))
        fail('unexpected defaults directive');
    } else if (body === 'mode tcp') {
      // Every owned section is TCP.
    } else if (section.kind === 'frontend') {
      const f = section.f;
      const delay = /^tcp-request inspect-delay ([0-9]+)ms$/.exec(body);
      const use = /^use_backend (\S+) if \{ req\.ssl_sni -i (\S+) \}$/.exec(body);
      if (kw === 'id' && /^[0-9]{1,10}$/.test(arg ?? '') && words.length === 2) {
        if (frontends.length === 1) generation = Number(arg);
      } else if (kw === 'bind' && words.length === 2) {
        f.bind = parseAddress(arg ?? '') ?? fail('bad bind');
      } else if (delay) {
        f.inspectDelayMs = Number(delay[1]);
      } else if (body === 'tcp-request content accept if { req.ssl_hello_type 1 }') {
        f.acceptsTlsHello = true;
      } else if (use) {
        const rule: RawRule = { backend: use[1] ?? '', host: use[2] ?? '', tags: parseTags(comment, lineNo) };
        if (!isHaproxyName(rule.backend) || !HOST.test(rule.host)) fail('bad switching rule');
        f.rules.push(rule);
      } else if (kw === 'default_backend' && words.length === 2 && isHaproxyName(arg ?? '')) {
        f.defaultBackend = arg as string;
      } else {
        fail('unexpected frontend directive');
      }
    } else {
      const b = section.b;
      if (kw === 'balance' && words.length === 2 && BALANCE.has(arg ?? '')) {
        b.balance = arg as string;
      } else if (kw === 'server' && (words.length === 3 || (words.length === 4 && words[3] === 'check'))) {
        const at = parseAddress(words[2] ?? '');
        if (!isHaproxyName(arg ?? '') || !at || at.address === '*') fail('bad server');
        b.servers.push({
          name: arg as string,
          address: (at as { address: string }).address,
          port: (at as { port: number }).port,
          check: words.length === 4,
          tags: parseTags(comment, lineNo),
        });
      } else {
        fail('unexpected backend directive');
      }
    }
  }
  return { state: { frontends, backends }, generation };
}
