import type { Logger } from 'pino';
import type { RawServer } from '../../haproxy/model.js';
import { ConcurrentChangeError } from '../../model/errors.js';
import { type DataplaneClient, DataplaneHttpError, versionOf } from './client.js';
import { mapText } from './map-routing.js';
import type { Counter } from './options.js';
import { API_HEAD, type LineTags, serverLine } from './raw-lines.js';

/**
 * Persistence off the critical path: servers added or removed at runtime (`runtime-maps.ts`) are written to
 * the configuration file soon after, batched, without a reload (`POST /configuration/raw?skip_reload=true`:
 * checked on the real API, HAProxy does not reload), so that a reload or restart by anyone comes back with
 * them. At most `maxDelayMs` after the first change waiting, `debounceMs` after the last one.
 */
export interface PersistOptions {
  debounceMs: number;
  maxDelayMs: number;
  logger: Logger;
  /** How server lines carry tags in this API version. */
  lines: () => LineTags;
  /**
   * Called after a write: the version the file was read at and the one the write left (the configuration's
   * objects are unchanged but for the servers written).
   */
  written: (
    from: number | undefined,
    to: number | undefined,
    servers: ReadonlyMap<string, RawServer[]>,
  ) => void;
  /**
   * Writes the servers of the backends that live in the slots file (`slots-file.ts`) there, and answers the
   * rest, for the configuration. Absent: every backend is the configuration's.
   */
  writeFileServers?: (servers: ReadonlyMap<string, RawServer[]>) => Promise<ReadonlyMap<string, RawServer[]>>;
  /** Writes a map file's text to the API's storage (no reload: the next one loads it). */
  writeMap: (name: string, text: string) => Promise<void>;
}

const ATTEMPTS = 3;
const serverRe = /^\s+server\s+(\S+)\s/;

/**
 * `text` with the server lines of each backend named in `servers` replaced by those servers (a line kept
 * byte for byte when its server is there with the same endpoint). Backends not in the text are skipped:
 * whoever deleted one has made its servers moot. Only those sections are split into lines: the rest of the
 * file (megabytes at thousands of slots) is copied as it is, so a write costs the backends it names, not a
 * parse of the file on the event loop. Same output as `render(parse(text))` with those sections edited. Pure.
 */
export function withServers(text: string, servers: ReadonlyMap<string, RawServer[]>, t: LineTags): string {
  const body = text.replace(/\n$/, '');
  const headEnd = SECTION_START.exec(body)?.index ?? body.length;
  const headText = body.slice(0, headEnd).replace(/\n$/, '');
  const head = headEnd === 0 ? [] : headText.split('\n').filter((line) => !API_HEAD.test(line));
  const rest = body.slice(headEnd);
  const out: string[] = [];
  let copied = 0;
  if (servers.size > 0) {
    const names = [...servers.keys()].map((n) => n.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')).join('|');
    const named = new RegExp(`^backend[ \\t]+(${names})(?=[ \\t]|$)`, 'gm');
    for (const m of rest.matchAll(named)) {
      const at = m.index;
      NEXT_SECTION.lastIndex = at + 1;
      const end = NEXT_SECTION.exec(rest)?.index ?? rest.length;
      out.push(rest.slice(copied, at));
      const want = servers.get(m[1] as string) as RawServer[];
      out.push(withSectionServers(rest.slice(at, end).split('\n'), want, t).join('\n'));
      copied = end;
    }
  }
  out.push(rest.slice(copied));
  const sections = out.join('');
  const all = head.length > 0 ? `${head.join('\n')}\n${sections}` : sections;
  return `${all.replace(/\n+$/, '')}\n`;
}

/** A line that starts a section (as `parse` tells them), and the newline before the next one. */
const SECTION_START = /^[^\s#]/m;
const NEXT_SECTION = /\n(?=[^\s#])/g;

/** One backend section's lines (header first) with its server lines made `want`, blank lines kept last. */
export function withSectionServers(lines: readonly string[], want: RawServer[], t: LineTags): string[] {
  const byName = new Map(want.map((x) => [x.name, x]));
  let end = lines.length;
  while (end > 1 && (lines[end - 1] as string).trim() === '') end--;
  const kept: string[] = [];
  const have = new Set<string>();
  for (const line of lines.slice(0, end)) {
    const name = serverRe.exec(line)?.[1];
    if (name === undefined) {
      kept.push(line);
      continue;
    }
    const server = byName.get(name);
    if (!server) continue;
    have.add(name);
    kept.push(sameEndpoint(line, server) ? line : serverLine(server, t));
  }
  const added = want.filter((x) => !have.has(x.name)).map((x) => serverLine(x, t));
  return [...kept, ...added, ...lines.slice(end)];
}

function sameEndpoint(line: string, s: RawServer): boolean {
  const endpoint = line.trim().split(/\s+/)[2] ?? '';
  const address = s.address.includes(':') ? `[${s.address}]` : s.address;
  return endpoint === `${address}:${s.port}`;
}

export class Persistence {
  private readonly pending = new Map<string, RawServer[]>();
  /** SNI maps (logical name) whose file must hold these entries, as HAProxy runs them now. */
  private readonly pendingMaps = new Map<string, ReadonlyMap<string, string>>();
  private timer: NodeJS.Timeout | undefined;
  private firstAt = 0;
  private running: Promise<void> | undefined;
  /** The last persistence's duration and backends written, for logs and the report. */
  last: { ms: number; backends: number } | undefined;
  private lastEnd = 0;

  constructor(
    private readonly client: DataplaneClient,
    private readonly o: PersistOptions,
  ) {}

  /**
   * Backends whose servers, and maps whose entries, as now run, must reach the files. The entries are kept,
   * not copied: a state's map is never changed in place (`applyOperations` copies on write).
   */
  schedule(
    servers: ReadonlyMap<string, RawServer[]>,
    maps: ReadonlyMap<string, ReadonlyMap<string, string>> = new Map(),
  ): void {
    if (servers.size === 0 && maps.size === 0) return;
    if (!this.isPending) this.firstAt = Date.now();
    for (const [b, list] of servers) this.pending.set(b, structuredClone(list));
    for (const [name, entries] of maps) this.pendingMaps.set(name, entries);
    if (this.timer) clearTimeout(this.timer);
    const now = Date.now();
    // The API parses the whole configuration for each write (seconds at thousands of slots): the next write
    // waits as long as the last one took, so persistence keeps the API busy half the time at most.
    const spacing = this.last ? this.lastEnd + this.last.ms - now : 0;
    const wait = Math.max(0, spacing, Math.min(this.o.debounceMs, this.firstAt + this.o.maxDelayMs - now));
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.flush().catch((err) =>
        this.o.logger.warn({ err }, 'runtime servers not yet written to the configuration; retried'),
      );
    }, wait);
    this.timer.unref();
  }

  get isPending(): boolean {
    return this.pending.size > 0 || this.pendingMaps.size > 0 || this.running !== undefined;
  }

  /** Waits for a write under way, if any (its outcome aside): whether there was one. */
  async settle(): Promise<boolean> {
    if (!this.running) return false;
    await this.running.catch(() => {});
    return true;
  }

  /** Writes what is pending now (and waits for a write under way). A failure keeps it pending and retries. */
  async flush(): Promise<void> {
    while (this.running) await this.running.catch(() => {});
    if (this.pending.size === 0 && this.pendingMaps.size === 0) return;
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    const batch = new Map(this.pending);
    const maps = new Map(this.pendingMaps);
    this.pending.clear();
    this.pendingMaps.clear();
    this.running = this.write(batch, maps).finally(() => {
      this.running = undefined;
    });
    try {
      await this.running;
    } catch (err) {
      // Newer changes win over the failed batch's.
      for (const [b, list] of batch) if (!this.pending.has(b)) this.pending.set(b, list);
      for (const [m, entries] of maps) if (!this.pendingMaps.has(m)) this.pendingMaps.set(m, entries);
      this.retryLater();
      throw err;
    }
  }

  private retryLater(): void {
    if (this.timer) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.flush().catch(() => {});
    }, this.o.maxDelayMs);
    this.timer.unref();
  }

  private async write(
    batch: Map<string, RawServer[]>,
    maps: Map<string, ReadonlyMap<string, string>>,
  ): Promise<void> {
    const started = Date.now();
    // Servers first: a crash between the two leaves servers no entry names, never an entry naming a slot
    // without its servers in the file.
    const rest = batch.size > 0 && this.o.writeFileServers ? await this.o.writeFileServers(batch) : batch;
    if (rest.size > 0) await this.writeServers(new Map(rest));
    for (const [name, entries] of maps) await this.o.writeMap(name, mapText(entries));
    this.lastEnd = Date.now();
    this.last = { ms: this.lastEnd - started, backends: batch.size };
    this.o.logger.debug({ ...this.last, maps: maps.size }, 'runtime changes written to the files');
  }

  private async writeServers(batch: Map<string, RawServer[]>): Promise<void> {
    const counter: Counter = { requests: 0 };
    for (let attempt = 1; ; attempt++) {
      const res = await this.client.GET('/services/haproxy/configuration/raw', {});
      const version = versionOf(res.headers);
      const text = String(res.data);
      const edited = withServers(text, batch, this.o.lines());
      if (edited === text) return;
      try {
        counter.requests += 2;
        const pushed = await this.client.POST('/services/haproxy/configuration/raw', {
          params: { query: { ...(version !== undefined ? { version } : {}), skip_reload: true } },
          body: edited,
        });
        this.o.written(version, versionOf(pushed.headers), batch);
        return;
      } catch (err) {
        const conflict = err instanceof DataplaneHttpError && err.status === 409;
        if (!conflict) throw err;
        if (attempt >= ATTEMPTS)
          throw new ConcurrentChangeError('the configuration kept changing while servers were persisted');
      }
    }
  }

  close(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
  }
}
