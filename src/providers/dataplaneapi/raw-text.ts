import type { Owner, RawBackend, RawFrontend, RawState, Tags } from '../../haproxy/model.js';
import { applyOperations } from '../../plan/apply.js';
import type { Operation } from '../../plan/plan.js';
import type { TagStore } from './capability.js';
import {
  backendLines,
  type ConfigText,
  frontendLines,
  hostPort,
  type LineTags,
  lineTags,
  lineTagsFor,
  META,
  parse,
  render,
  ruleLine,
  type Section,
  sectionTagsOf,
  serverLine,
} from './raw-lines.js';

/**
 * The whole configuration file as the Data Plane API stores it (`GET /configuration/raw`), edited as text for
 * plans too large for one request per object: a new frontend or backend is rendered in the API's own form
 * (tags as the API version keeps them, `tags.ts`: a JSON comment on the line, or a `description` line), the
 * service's objects are changed line by line, and every other line, foreign sections included, is sent back
 * byte for byte. Pure. Anything it cannot do by text is refused with `RawEditUnsupported`, and the caller uses
 * a transaction instead.
 */
export class RawEditUnsupported extends Error {
  override readonly name = 'RawEditUnsupported';
}

/** The body of a section without its trailing blank lines, and those blank lines. */
function split(lines: string[]): { body: string[]; tail: string[] } {
  let end = lines.length;
  while (end > 1 && (lines[end - 1] as string).trim() === '') end--;
  return { body: lines.slice(0, end), tail: lines.slice(end) };
}

const serverRe = /^\s+server\s+(\S+)\s+(\S+)(.*)$/;
const isRule = (l: string) => /^\s+use_backend\s/.test(l);

/** What the operations touch, by object: the text is changed there only. */
function touched(operations: readonly Operation[]) {
  const t = {
    created: new Set<string>(),
    deleted: new Set<string>(),
    rules: new Set<string>(),
    servers: new Map<string, Set<string>>(),
  };
  for (const op of operations) {
    switch (op.kind) {
      case 'create_frontend':
        // The map rule needs the map's path in the API's storage: a transaction writes it.
        if (op.frontend.sniMap) throw new RawEditUnsupported('a frontend that routes by a map');
        t.created.add(op.frontend.name);
        break;
      case 'create_backend':
        t.created.add(op.backend.name);
        break;
      case 'delete_frontend':
      case 'delete_backend':
        t.deleted.add(op.name);
        break;
      case 'update_frontend':
        throw new RawEditUnsupported('a change of the frontend settings');
      case 'update_backend':
        throw new RawEditUnsupported('a change of a backend setting');
      case 'set_switching_rules':
        t.rules.add(op.frontend);
        break;
      case 'set_map_entry':
      case 'delete_map_entry':
        // Map entries live in the map file, not in the configuration text.
        break;
      default:
        t.servers.set(op.backend, (t.servers.get(op.backend) ?? new Set()).add(op.server.name));
    }
  }
  return t;
}

/**
 * `text`, which holds `before`, edited to hold what `operations` make of it (`applyOperations` says what that
 * is; this only writes it down). New sections are appended in the API's own form; in an existing backend
 * only the server lines named change, and their other options stay; a frontend's rules are rewritten only
 * when every rule in it, before and after, is `owner`'s (a rule line without tags in a frontend tagged by its
 * description is its backend's, as `mapping.ts` reads it).
 */
export function editConfigText(
  text: string,
  before: RawState,
  operations: readonly Operation[],
  owner: Owner,
  store: TagStore,
): string {
  const t = touched(operations);
  // Map entries are the map file's (written apart), not the text's: `before` holds none to check them against.
  const inText = operations.filter((op) => op.kind !== 'set_map_entry' && op.kind !== 'delete_map_entry');
  const after = applyOperations(before, inText, owner);
  const lines = lineTagsFor(store);
  const backendTags = new Map(before.backends.map((b) => [b.name, b.tags]));
  const c = parse(text);
  const section = (name: string): Section => {
    const s = c.sections.find((x) => (x.kind === 'frontend' || x.kind === 'backend') && x.name === name);
    if (!s) throw new RawEditUnsupported(`${name} is not in the file as read`);
    return s;
  };
  for (const name of t.deleted) c.sections = c.sections.filter((x) => x !== section(name));
  for (const f of after.frontends) {
    if (t.created.has(f.name)) {
      if (f.rules.some((r) => !owner.owns(r.tags)))
        throw new RawEditUnsupported('a new frontend with rules of another owner');
      append(c, frontendLines(f, lines));
    } else if (t.rules.has(f.name)) {
      const s = section(f.name);
      const byShape = sectionTagsOf(s).byDescription;
      const ruleTags = (l: string): Tags => {
        const own = lineTags(l);
        if (Object.keys(own).length > 0 || !byShape) return own;
        return backendTags.get(l.trim().split(/\s+/)[1] ?? '') ?? {};
      };
      rewriteRules(s, f, owner, ruleTags, lines);
    }
  }
  for (const b of after.backends) {
    if (t.created.has(b.name)) append(c, backendLines(b, lines));
    else if (t.servers.has(b.name))
      rewriteServers(section(b.name), b, t.servers.get(b.name) as Set<string>, lines);
  }
  return render(c);
}

function append(c: ConfigText, lines: string[]): void {
  const last = c.sections[c.sections.length - 1];
  if (last && (last.lines[last.lines.length - 1] as string).trim() !== '') last.lines.push('');
  const [kind, name] = (lines[0] ?? '').replace(META, '').split(' ');
  c.sections.push({ kind: kind ?? '', name, lines: [...lines, ''] });
}

function rewriteRules(
  s: Section,
  f: RawFrontend,
  owner: Owner,
  ruleTags: (line: string) => Tags,
  t: LineTags,
): void {
  const { body, tail } = split(s.lines);
  if (f.rules.some((r) => !owner.owns(r.tags)) || body.filter(isRule).some((l) => !owner.owns(ruleTags(l))))
    throw new RawEditUnsupported('rules of another owner');
  let at = body.findIndex(isRule);
  if (at < 0) {
    const dflt = body.findIndex((l) => /^\s+default_backend\s/.test(l));
    at = dflt >= 0 ? dflt : body.length;
  }
  const kept = body.filter((l) => !isRule(l));
  const before = kept.slice(0, body.slice(0, at).filter((l) => !isRule(l)).length);
  s.lines = [...before, ...f.rules.map((r) => ruleLine(r, t)), ...kept.slice(before.length), ...tail];
}

/** The backend's server lines as `b` has them: named servers changed in place, new ones after the last. */
function rewriteServers(s: Section, b: RawBackend, named: Set<string>, t: LineTags): void {
  const wanted = new Map(b.servers.map((x) => [x.name, x]));
  const { body, tail } = split(s.lines);
  const lines: string[] = [];
  const seen = new Set<string>();
  for (const line of body) {
    const m = serverRe.exec(line);
    const name = m?.[1];
    if (!m || name === undefined || !named.has(name)) {
      lines.push(line);
      continue;
    }
    seen.add(name);
    const server = wanted.get(name);
    if (!server) continue; // deleted
    if (/\bcheck\b/.test((m[3] ?? '').replace(META, '')) !== server.check)
      throw new RawEditUnsupported('a change of a server check setting');
    lines.push(line.replace(/^(\s+server\s+\S+\s+)\S+/, `$1${hostPort(server.address, server.port)}`));
  }
  for (const name of named) {
    const server = wanted.get(name);
    if (seen.has(name)) continue;
    if (!server) throw new RawEditUnsupported(`server ${b.name}/${name} not in the file`);
    lines.push(serverLine(server, t));
  }
  s.lines = [...lines, ...tail];
}

/** The version the API wrote into the file's head (`# _version=N`), if any. */
export function textVersion(text: string): number | undefined {
  const m = /^# _version=(\d+)\s*$/m.exec(text.slice(0, 4096));
  return m ? Number(m[1]) : undefined;
}
