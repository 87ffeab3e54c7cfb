import type { RawBackend, RawFrontend, RawRule, RawServer, Tags } from '../../haproxy/model.js';
import type { TagStore } from './capability.js';
import {
  BIND_NAME,
  checkedBindAddress,
  checkedHost,
  checkedName,
  checkedPort,
  checkedServerAddress,
} from './mapping.js';
import { RefusedOperationError } from './objects.js';
import { checkedTags, descriptionToTags, metadataToTags, tagsToDescription, tagsToMetadata } from './tags.js';

/**
 * The configuration file's text as sections of lines (pure), and the service's objects rendered in the API's
 * own form, with tags where the API version keeps them (`tags.ts`): a JSON comment on the line (metadata), or
 * a `description` line first in the section.
 */
export interface Section {
  kind: string;
  name: string | undefined;
  /** The header line first, then the body, blank lines after it included. */
  lines: string[];
}

export interface ConfigText {
  head: string[];
  sections: Section[];
}

/** Lines the API writes at the top of the file for itself; it writes them again on every push. */
export const API_HEAD = /^# (_md5hash=|_version=|Dataplaneapi managed File|changing file directly)/;
export const META = / # (\{.*\})\s*$/;

export function parse(text: string): ConfigText {
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

export function render(c: ConfigText): string {
  return `${[...c.head, ...c.sections.flatMap((s) => s.lines)].join('\n').replace(/\n+$/, '')}\n`;
}

/** Tags from a line's metadata comment; none when it has no comment the API wrote. */
export function lineTags(line: string): Tags {
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

const DESCRIPTION_LINE = /^\s+description\s/;

/** A section's tags: its header's comment, else its description line; and whether they are in the latter. */
export function sectionTagsOf(s: Section): { tags: Tags; byDescription: boolean } {
  const header = lineTags(s.lines[0] ?? '');
  if (Object.keys(header).length > 0) return { tags: header, byDescription: false };
  const line = s.lines.find((l) => DESCRIPTION_LINE.test(l));
  const tags = line ? descriptionToTags(line.trim().split(/\s+/).slice(1).join(' ')) : {};
  return { tags, byDescription: Object.keys(tags).length > 0 };
}

export function hostPort(address: string, port: number): string {
  const a = checkedServerAddress(address);
  return `${a.includes(':') ? `[${a}]` : a}:${checkedPort(port, 'server')}`;
}

export function serverLine(s: RawServer, t: LineTags): string {
  return `  server ${checkedName(s.name, 'server')} ${hostPort(s.address, s.port)}${s.check ? ' check' : ''}${t.server(s.tags)}`;
}

export function ruleLine(r: RawRule, t: LineTags): string {
  return `  use_backend ${checkedName(r.backend, 'backend')} if { req.ssl_sni -i ${checkedHost(r.host)} }${t.child(r.tags)}`;
}

export function frontendLines(f: RawFrontend, t: LineTags): string[] {
  const delay = f.inspectDelayMs;
  if (f.bind === null || delay === null || !Number.isInteger(delay) || delay < 0)
    throw new RefusedOperationError(`frontend ${f.name} without a bind or a valid inspect delay`);
  const own = t.child(f.tags);
  return [
    `frontend ${checkedName(f.name, 'frontend')}${t.header(f.tags)}`,
    ...t.first(f.tags),
    '  mode tcp',
    `  bind ${checkedBindAddress(f.bind.address)}:${checkedPort(f.bind.port, 'bind')} name ${BIND_NAME}${own}`,
    // Never tagged: v3.2.15 doubles a comment on this line at every write of the file (`objects.ts`).
    `  tcp-request inspect-delay ${delay}ms`,
    `  tcp-request content accept if { req.ssl_hello_type 1 }${own}`,
    ...f.rules.map((r) => ruleLine(r, t)),
    ...(f.defaultBackend !== null ? [`  default_backend ${checkedName(f.defaultBackend, 'backend')}`] : []),
  ];
}

export function backendLines(b: RawBackend, t: LineTags): string[] {
  return [
    `backend ${checkedName(b.name, 'backend')}${t.header(b.tags)}`,
    ...t.first(b.tags),
    '  mode tcp',
    `  balance ${checkedName(b.balance, 'balance algorithm')}`,
    ...b.servers.map((s) => serverLine(s, t)),
  ];
}
