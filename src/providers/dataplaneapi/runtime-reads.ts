import type { DataplaneClient } from './client.js';
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
 * Every backend HAProxy runs, with the servers it runs, from two stats requests (no request per backend): a
 * backend without servers is listed, empty.
 */
export async function readRunningServers(
  client: DataplaneClient,
  signal: AbortSignal,
  counter: Counter,
): Promise<Map<string, RunningServer[]>> {
  counter.requests += 2;
  const [backends, res] = await Promise.all([
    client.GET('/services/haproxy/stats/native', { params: { query: { type: 'backend' } }, signal }),
    client.GET('/services/haproxy/stats/native', { params: { query: { type: 'server' } }, signal }),
  ]);
  const out = new Map<string, RunningServer[]>();
  for (const c of Array.isArray(backends.data) ? backends.data : [backends.data])
    for (const b of c?.stats ?? []) if (b.type === 'backend' && b.name) out.set(b.name, []);
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
