import { parseAddress } from '../../haproxy/address.js';
import { isEdgeLine, isSlotGuardLine, REFUSALS_TABLE, readEdge, readSlotGuard } from '../../haproxy/edge.js';
import type { RawBackend, RawFrontend, RawRule, RawServer, RawState, Tags } from '../../haproxy/model.js';
import { allowMapNameFor, isHaproxyName } from '../../naming/names.js';
import { DEFAULT_OWNER_ID, TAG_KEY, TAG_VALUE } from '../../registry/registry.js';
import { MAP_USE_BACKEND, mapNameOf } from './map-file.js';
import { BALANCE, DEFAULTS_BODY, DEFAULTS_NAME, HOST, TAG_MARK } from './owned-file.js';

/**
 * Reading back the owned file `renderOwnedFile` wrote (`owned-file.ts`). Pure. Anything it did not write is
 * refused with its line number: the service never guesses at configuration it does not understand.
 */
export class OwnedFileParseError extends Error {
  override readonly name = 'OwnedFileParseError';
}

/** What the parser builds, line by line, before handing it out read-only. */
type Building<T> = { -readonly [K in keyof T]: T[K] };
type FrontendBuild = Building<RawFrontend> & { rules: RawRule[]; body: string[] };
type BackendBuild = Building<RawBackend> & { servers: RawServer[]; body: string[] };

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

type Section =
  | { kind: 'defaults' }
  | { kind: 'frontend'; f: FrontendBuild }
  | { kind: 'backend'; b: BackendBuild }
  | null;

/** One line, split into its directive and its tag comment; `fail` names the line. */
interface Line {
  body: string;
  words: string[];
  comment: string | undefined;
  lineNo: number;
  fail(why: string): never;
}

/**
 * Reads back a file `renderOwnedFile` wrote, with the `defaults` name and the allow map of its owner (the
 * guard's lines do not name the latter); an SNI map, and a slot's own allow map, must be a file of `mapDir`
 * (the owned file's folder).
 */
export function parseOwnedFile(
  text: string,
  defaultsName = DEFAULTS_NAME,
  mapDir?: string,
  allowMap = allowMapNameFor(DEFAULT_OWNER_ID),
): ParsedOwnedFile {
  const state: { frontends: FrontendBuild[]; backends: BackendBuild[] } = { frontends: [], backends: [] };
  let generation: number | null = null;
  let section: Section = null;
  const lines = text.split('\n');
  for (let i = 0; i < lines.length; i++) {
    const raw = lines[i] ?? '';
    const hash = raw.indexOf('#');
    const body = (hash >= 0 ? raw.slice(0, hash) : raw).trim();
    if (body === '') continue;
    const line: Line = {
      body,
      words: body.split(/\s+/),
      comment: hash >= 0 ? raw.slice(hash + 1) : undefined,
      lineNo: i + 1,
      fail: (why) => {
        throw new OwnedFileParseError(`line ${i + 1}: ${why}: ${JSON.stringify(body)}`);
      },
    };
    const [kw] = line.words;
    if (kw === 'defaults' || kw === 'frontend' || kw === 'backend') {
      section = sectionLine(line, defaultsName, state);
    } else if (section === null) {
      line.fail('directive outside a section');
    } else if (section.kind === 'defaults') {
      if (!(DEFAULTS_BODY as readonly string[]).includes(line.words.join(' ')))
        line.fail('unexpected defaults directive');
    } else if (body === 'mode tcp') {
      // Every owned section is TCP.
    } else if (section.kind === 'frontend') {
      const id = frontendLine(line, section.f, mapDir);
      if (id !== undefined && state.frontends.length === 1) generation = id;
    } else {
      backendLine(line, section.b);
    }
  }
  // The guard's lines are read as a whole (`readEdge`): a line of it changed by hand reads as no guard.
  const frontends = state.frontends.map(({ body, ...f }) => {
    const read = readEdge(body, allowMap);
    return {
      ...f,
      inspectDelayMs: read.inspectDelayMs,
      acceptsTlsHello: read.acceptsTlsHello,
      ...(read.edge ? { edge: read.edge } : {}),
    };
  });
  // A slot's guard likewise (`readSlotGuard`), naming a map of the folder.
  const backends = state.backends.map(({ body, ...b }) => {
    const file = readSlotGuard(body);
    const name = file === undefined || mapDir === undefined ? null : mapNameOf(mapDir, file);
    return name === null ? b : { ...b, allowMap: name };
  });
  return { state: { frontends, backends }, generation };
}

function sectionLine(
  line: Line,
  defaultsName: string,
  state: { frontends: FrontendBuild[]; backends: BackendBuild[] },
): Section {
  const [kw, arg] = line.words;
  if (kw === 'defaults') {
    if (arg !== defaultsName || line.words.length !== 2) line.fail('unexpected defaults section');
    return { kind: 'defaults' };
  }
  const w = line.words;
  if (w.length !== 4 || w[2] !== 'from' || w[3] !== defaultsName || !isHaproxyName(arg ?? ''))
    line.fail(`unexpected ${kw} line`);
  const tags = parseTags(line.comment, line.lineNo);
  if (kw === 'frontend') {
    const f: FrontendBuild = {
      name: arg as string,
      bind: null,
      inspectDelayMs: null,
      acceptsTlsHello: false,
      defaultBackend: null,
      rules: [],
      body: [],
      tags,
    };
    state.frontends.push(f);
    return { kind: 'frontend', f };
  }
  const b: BackendBuild = { name: arg as string, balance: '', servers: [], body: [], tags };
  state.backends.push(b);
  return { kind: 'backend', b };
}

/** A frontend directive into `f`; the frontend's `id` (the file's generation) is returned. */
function frontendLine(line: Line, f: FrontendBuild, mapDir: string | undefined): number | undefined {
  const { body, words, fail } = line;
  const [kw, arg] = words;
  const byMap = MAP_USE_BACKEND.exec(body);
  const use = /^use_backend (\S+) if \{ req\.ssl_sni -i (\S+) \}$/.exec(body);
  if (kw === 'id' && /^[0-9]{1,10}$/.test(arg ?? '') && words.length === 2) return Number(arg);
  if (kw === 'bind' && (words.length === 2 || (words.length === 3 && words[2] === 'accept-proxy'))) {
    const at = parseAddress(arg ?? '') ?? fail('bad bind');
    f.bind = words.length === 3 ? { ...at, acceptProxy: true } : at;
  } else if (isEdgeLine(words.join(' '))) {
    f.body.push(words.join(' '));
  } else if (byMap) {
    const name = mapDir === undefined ? null : mapNameOf(mapDir, byMap[1] ?? '');
    if (name === null || f.sniMap) fail("bad SNI map (one per frontend, in the owned file's folder)");
    f.sniMap = name;
  } else if (use) {
    const rule: RawRule = {
      backend: use[1] ?? '',
      host: use[2] ?? '',
      tags: parseTags(line.comment, line.lineNo),
    };
    if (!isHaproxyName(rule.backend) || !HOST.test(rule.host)) fail('bad switching rule');
    f.rules.push(rule);
  } else if (kw === 'default_backend' && words.length === 2 && isHaproxyName(arg ?? '')) {
    f.defaultBackend = arg as string;
  } else {
    fail('unexpected frontend directive');
  }
  return undefined;
}

function backendLine(line: Line, b: BackendBuild): void {
  const { words, fail } = line;
  const [kw, arg] = words;
  if (kw === 'balance' && words.length === 2 && BALANCE.has(arg ?? '')) {
    b.balance = arg as string;
  } else if (isSlotGuardLine(words.join(' '))) {
    b.body.push(words.join(' '));
  } else if (kw === 'stick-table' && line.words.join(' ') === `stick-table ${REFUSALS_TABLE}`) {
    b.table = REFUSALS_TABLE;
  } else if (kw === 'server' && (words.length === 3 || (words.length === 4 && words[3] === 'check'))) {
    const at = parseAddress(words[2] ?? '');
    if (!isHaproxyName(arg ?? '') || !at || at.address === '*') fail('bad server');
    b.servers.push({
      name: arg as string,
      address: (at as { address: string }).address,
      port: (at as { port: number }).port,
      check: words.length === 4,
      tags: parseTags(line.comment, line.lineNo),
    });
  } else {
    fail('unexpected backend directive');
  }
}
