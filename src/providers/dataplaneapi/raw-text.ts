import type { Tags } from '../../haproxy/model.js';
import type { Operation } from '../../plan/plan.js';
import { isOwned, ownerTags } from '../../registry/ownership.js';
import {
  checkedBindAddress,
  checkedHost,
  checkedName,
  checkedPort,
  checkedServerAddress,
  checkedTags,
  metadataToTags,
  tagsToMetadata,
} from './mapping.js';
import { BIND_NAME, RefusedOperationError } from './writes.js';

/**
 * The whole configuration file as the Data Plane API stores it (`GET /configuration/raw`), edited as text for
 * plans too large for one request per object: a new frontend or backend is rendered in the API's own form
 * (metadata as a JSON comment on the line, as the API writes it), the service's objects are changed line by
 * line, and every other line, foreign sections included, is sent back byte for byte. Pure. Anything it
 * cannot do by text is refused with `RawEditUnsupported`, and the caller uses a transaction instead.
 */
export class RawEditUnsupported extends Error {
  override readonly name = 'RawEditUnsupported';
}

interface Section {
  kind: string;
  name: string | undefined;
  /** The header line first, then the body, blank lines after it included. */
  lines: string[];
}

interface ConfigText {
  head: string[];
  sections: Section[];
}

/** Lines the API writes at the top of the file for itself; it writes them again on every push. */
const API_HEAD = /^# (_md5hash=|_version=|Dataplaneapi managed File|changing file directly)/;
const META = / # (\{.*\})\s*$/;

function parse(text: string): ConfigText {
  const head: string[] = [];
  const sections: Section[] = [];
  for (const line of text.replace(/\n$/, '').split('\n')) {
    if (/^[^\s#]/.test(line)) {
      const words = line.replace(META, '').trim().split(/\s+/);
      sections.push({ kind: words[0] ?? '', name: words[1], lines: [line] });
    } else if (sections.length > 0) {
      (sections[sections.length - 1] as Section).lines.push(line);
    } else if (!API_HEAD.test(line)) {
      head.push(line);
    }
  }
  return { head, sections };
}

function render(c: ConfigText): string {
  return `${[...c.head, ...c.sections.flatMap((s) => s.lines)].join('\n').replace(/\n+$/, '')}\n`;
}

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

function comment(tags: Tags): string {
  const meta = tagsToMetadata(checkedTags(tags));
  const sorted = Object.fromEntries(Object.entries(meta).sort(([a], [b]) => (a < b ? -1 : 1)));
  return ` # ${JSON.stringify(sorted)}`;
}

const OWN = () => comment(ownerTags());

function hostPort(address: string, port: number): string {
  const a = checkedServerAddress(address);
  return `${a.includes(':') ? `[${a}]` : a}:${checkedPort(port, 'server')}`;
}

function serverLine(s: { name: string; address: string; port: number; check: boolean }): string {
  return `  server ${checkedName(s.name, 'server')} ${hostPort(s.address, s.port)}${s.check ? ' check' : ''}${OWN()}`;
}

function ruleLine(r: { backend: string; host: string }): string {
  return `  use_backend ${checkedName(r.backend, 'backend')} if { req.ssl_sni -i ${checkedHost(r.host)} }${OWN()}`;
}

/** The body of a section without its trailing blank lines, and those blank lines. */
function split(lines: string[]): { body: string[]; tail: string[] } {
  let end = lines.length;
  while (end > 1 && (lines[end - 1] as string).trim() === '') end--;
  return { body: lines.slice(0, end), tail: lines.slice(end) };
}

const serverRe = /^\s+server\s+(\S+)\s+(\S+)(.*)$/;

/**
 * `text` with `operations` applied. Each object changed must carry the service's tags in the text too;
 * rules are only rewritten in a frontend that holds no rule of another owner.
 */
export function editConfigText(text: string, operations: readonly Operation[]): string {
  const c = parse(text);
  const find = (kind: string, name: string) => c.sections.find((s) => s.kind === kind && s.name === name);
  const owned = (kind: string, name: string): Section => {
    const s = find(kind, name);
    if (!s) throw new RawEditUnsupported(`${kind} ${name} is not in the file as read`);
    if (!isOwned(lineTags(s.lines[0] as string)))
      throw new RefusedOperationError(`refusing to change ${kind} ${name}: it is not owned by this service`);
    return s;
  };
  const absent = (name: string) => {
    if (
      c.sections.some(
        (s) => (s.kind === 'frontend' || s.kind === 'backend' || s.kind === 'listen') && s.name === name,
      )
    )
      throw new RefusedOperationError(`refusing to create ${name}: a section of that name exists`);
  };
  const append = (lines: string[]) => {
    const last = c.sections[c.sections.length - 1];
    if (last && (last.lines[last.lines.length - 1] as string).trim() !== '') last.lines.push('');
    c.sections.push({
      kind: lines[0]?.split(' ')[0] ?? '',
      name: lines[0]?.split(' ')[1],
      lines: [...lines, ''],
    });
  };
  const remove = (s: Section) => {
    c.sections = c.sections.filter((x) => x !== s);
  };

  const newServers = new Map<string, Array<Extract<Operation, { kind: 'create_server' }>>>();
  const created = new Set<string>();
  for (const op of operations) {
    if (op.kind === 'create_backend') created.add(op.backend.name);
    if (op.kind === 'create_server' && created.has(op.backend))
      newServers.set(op.backend, [...(newServers.get(op.backend) ?? []), op]);
  }
  const rulesFor = new Map<string, Extract<Operation, { kind: 'set_switching_rules' }>>();
  for (const op of operations) if (op.kind === 'set_switching_rules') rulesFor.set(op.frontend, op);

  for (const op of operations) {
    switch (op.kind) {
      case 'create_frontend': {
        const f = op.frontend;
        absent(f.name);
        const rules = rulesFor.get(f.name);
        rulesFor.delete(f.name);
        if (rules?.rules.some((r) => !r.owned))
          throw new RawEditUnsupported('a new frontend with rules of another owner');
        const delay = f.inspectDelayMs;
        if (!Number.isInteger(delay) || delay < 0) throw new RefusedOperationError('bad inspect delay');
        append([
          `frontend ${checkedName(f.name, 'frontend')}${OWN()}`,
          '  mode tcp',
          `  bind ${checkedBindAddress(f.bind.address)}:${checkedPort(f.bind.port, 'bind')} name ${BIND_NAME}${OWN()}`,
          `  tcp-request inspect-delay ${delay}ms${OWN()}`,
          `  tcp-request content accept if { req.ssl_hello_type 1 }${OWN()}`,
          ...(rules?.rules ?? []).map(ruleLine),
          ...(f.defaultBackend !== null
            ? [`  default_backend ${checkedName(f.defaultBackend, 'backend')}`]
            : []),
        ]);
        break;
      }
      case 'update_frontend':
        throw new RawEditUnsupported('a change of the frontend settings');
      case 'delete_frontend':
        remove(owned('frontend', op.name));
        break;
      case 'create_backend': {
        const b = op.backend;
        absent(b.name);
        append([
          `backend ${checkedName(b.name, 'backend')}${comment(ownerTags(b.cluster))}`,
          '  mode tcp',
          `  balance ${checkedName(b.balance, 'balance algorithm')}`,
          ...(newServers.get(b.name) ?? []).map((s) => serverLine(s.server)),
        ]);
        break;
      }
      case 'update_backend':
        throw new RawEditUnsupported('a change of a backend setting');
      case 'delete_backend':
        remove(owned('backend', op.name));
        break;
      case 'create_server': {
        if (created.has(op.backend)) break;
        const s = owned('backend', op.backend);
        const { body, tail } = split(s.lines);
        if (body.some((l) => serverRe.exec(l)?.[1] === op.server.name))
          throw new RefusedOperationError(
            `refusing to create server ${op.backend}/${op.server.name}: it exists`,
          );
        s.lines = [...body, serverLine(op.server), ...tail];
        break;
      }
      case 'update_server':
      case 'delete_server': {
        const s = owned('backend', op.backend);
        const i = s.lines.findIndex((l) => serverRe.exec(l)?.[1] === op.server.name);
        const line = s.lines[i];
        if (line === undefined)
          throw new RawEditUnsupported(`server ${op.backend}/${op.server.name} not in the file`);
        if (!isOwned(lineTags(line)))
          throw new RefusedOperationError(
            `refusing to change server ${op.backend}/${op.server.name}: not owned`,
          );
        if (op.kind === 'delete_server') {
          s.lines.splice(i, 1);
          break;
        }
        const m = serverRe.exec(line) as RegExpExecArray;
        const rest = m[3] ?? '';
        if (/\bcheck\b/.test(rest.replace(META, '')) !== op.server.check)
          throw new RawEditUnsupported('a change of a server check setting');
        s.lines[i] = line.replace(
          /^(\s+server\s+\S+\s+)\S+/,
          `$1${hostPort(op.server.address, op.server.port)}`,
        );
        break;
      }
      case 'set_switching_rules': {
        if (!rulesFor.has(op.frontend)) break;
        if (op.rules.some((r) => !r.owned)) throw new RawEditUnsupported('rules of another owner');
        const s = owned('frontend', op.frontend);
        const isRule = (l: string) => /^\s+use_backend\s/.test(l);
        const current = s.lines.filter(isRule);
        if (current.some((l) => !isOwned(lineTags(l))))
          throw new RawEditUnsupported('rules of another owner');
        const { body, tail } = split(s.lines);
        let at = body.findIndex(isRule);
        if (at < 0) {
          const dflt = body.findIndex((l) => /^\s+default_backend\s/.test(l));
          at = dflt >= 0 ? dflt : body.length;
        }
        const kept = body.filter((l) => !isRule(l));
        const before = kept.slice(0, body.slice(0, at).filter((l) => !isRule(l)).length);
        const after = kept.slice(before.length);
        s.lines = [...before, ...op.rules.map(ruleLine), ...after, ...tail];
        break;
      }
    }
  }
  return render(c);
}

/** The version the API wrote into the file's head (`# _version=N`), if any. */
export function textVersion(text: string): number | undefined {
  const m = /^# _version=(\d+)\s*$/m.exec(text.slice(0, 4096));
  return m ? Number(m[1]) : undefined;
}
