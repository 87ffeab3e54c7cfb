import { type DataplaneClient, DataplaneHttpError } from './client.js';
import { storageName } from './map-names.js';
import type { Counter } from './reload.js';

/** What HAProxy runs, read through the API's runtime side: servers by backend, and map entries. */

/** A server as HAProxy runs it; `maint`: in maintenance (e.g. left draining by a delete). */
export interface RunningServer {
  name: string;
  address: string;
  port: number;
  maint: boolean;
}

/**
 * Past this many backends whose servers all went at runtime, one `stats/native?type=backend` tells which run
 * rather than a request each.
 */
export const PROBE_MAX = 32;

/**
 * Every server HAProxy runs, by backend, from one stats request (`type=server`: no request per backend). At
 * 20000 servers the API takes about seven seconds to answer it (8 MB): a full read asks for it before the
 * files, and reads them meanwhile.
 */
export async function readServerStats(
  client: DataplaneClient,
  signal: AbortSignal,
  counter: Counter,
): Promise<Map<string, RunningServer[]>> {
  counter.requests++;
  const res = await client.GET('/services/haproxy/stats/native', {
    params: { query: { type: 'server' } },
    signal,
  });
  const out = new Map<string, RunningServer[]>();
  const collections = Array.isArray(res.data) ? res.data : [res.data];
  for (const c of collections)
    for (const s of c?.stats ?? []) {
      if (s.type !== 'server' || !s.backend_name || !s.name) continue;
      const endpoint = parseAddr(s.stats?.addr);
      if (!endpoint) continue;
      const list = out.get(s.backend_name) ?? [];
      list.push({ name: s.name, ...endpoint, maint: /^MAINT/i.test(s.stats?.status ?? '') });
      out.set(s.backend_name, list);
    }
  return out;
}

/**
 * Every server HAProxy runs, by backend (`stats`: `readServerStats`' answer), and the backends of `files` (the
 * files as read) that run with no server left: those whose file names servers but the stats none, each asked
 * on its own (`runs`), or, past `PROBE_MAX`, all from one `type=backend` stats request. That request is not
 * made on every read: its answer carries every stat of every backend (4 MB and ten seconds of the API's time
 * at 5000 backends, more than the servers' own), and a backend with no server in its file reads the same
 * whether it runs empty or not at all.
 */
export async function readRunningServers(
  client: DataplaneClient,
  signal: AbortSignal,
  counter: Counter,
  files: ReadonlyArray<{ name: string; servers: readonly unknown[] }>,
  stats: Promise<Map<string, RunningServer[]>> = readServerStats(client, signal, counter),
): Promise<Map<string, RunningServer[]>> {
  const out = await stats;
  const unsure = files.filter((b) => b.servers.length > 0 && !out.has(b.name)).map((b) => b.name);
  if (unsure.length > PROBE_MAX) {
    counter.requests++;
    const backends = await client.GET('/services/haproxy/stats/native', {
      params: { query: { type: 'backend' } },
      signal,
    });
    const runs = new Set<string>();
    for (const c of Array.isArray(backends.data) ? backends.data : [backends.data])
      for (const b of c?.stats ?? []) if (b.type === 'backend' && b.name) runs.add(b.name);
    for (const name of unsure) if (runs.has(name)) out.set(name, []);
    return out;
  }
  for (let i = 0; i < unsure.length; i += 4) {
    const names = unsure.slice(i, i + 4);
    const runs = await Promise.all(names.map((name) => runsBackend(client, name, signal, counter)));
    names.forEach((name, j) => {
      if (runs[j] && !out.has(name)) out.set(name, []);
    });
  }
  return out;
}

/**
 * Whether HAProxy runs backend `name`: an unknown backend is answered `no data for <name>: not found` (404 on
 * v3.4, 500 on v3.0.23); an empty one `[]`.
 */
export async function runsBackend(
  client: DataplaneClient,
  name: string,
  signal: AbortSignal,
  counter: Counter,
): Promise<boolean> {
  counter.requests++;
  try {
    await client.GET('/services/haproxy/runtime/backends/{parent_name}/servers', {
      params: { path: { parent_name: name } },
      signal,
    });
    return true;
  } catch (err) {
    if (err instanceof DataplaneHttpError && /^no data for .*not found/.test(err.apiMessage)) return false;
    throw err;
  }
}

/** `1.2.3.4:80` or `[::1]:80`. */
function parseAddr(addr: string | undefined): { address: string; port: number } | undefined {
  const m = /^\[?([^\]]+?)\]?:(\d+)$/.exec(addr ?? '');
  if (!m?.[1] || !m[2]) return undefined;
  return { address: m[1], port: Number(m[2]) };
}

/** The entries of map `name` (logical), key -> value, as HAProxy runs them. */
export async function readRunningEntries(
  client: DataplaneClient,
  name: string,
  signal: AbortSignal,
  counter: Counter,
): Promise<Map<string, string>> {
  const entries = new Map<string, string>();
  counter.requests++;
  const res = await client.GET('/services/haproxy/runtime/maps/{parent_name}/entries', {
    params: { path: { parent_name: storageName(name) } },
    signal,
  });
  for (const e of res.data ?? []) if (e.key && e.value !== undefined) entries.set(e.key, e.value);
  return entries;
}

/**
 * The entries of map `name` as its file in the API's storage holds them; undefined when the API did not
 * answer the file's text (v3.0.23 and v3.2.15 answer `{}` as JSON when JSON is preferred: the client asks
 * for `application/octet-stream`, and an answer that is not the text is never read as an empty map).
 */
export async function readStoredEntries(
  client: DataplaneClient,
  name: string,
  signal: AbortSignal,
  counter: Counter,
): Promise<Map<string, string> | undefined> {
  counter.requests++;
  const res = await client.GET('/services/haproxy/storage/maps/{name}', {
    params: { path: { name: storageName(name) } },
    signal,
    text: true,
  });
  const text: unknown = res.data;
  if (typeof text !== 'string' || String(res.headers['content-type'] ?? '').includes('json'))
    return undefined;
  const entries = new Map<string, string>();
  for (const line of text.split('\n')) {
    const [key, value] = line.trim().split(/\s+/);
    if (key && value && !key.startsWith('#')) entries.set(key, value);
  }
  return entries;
}
