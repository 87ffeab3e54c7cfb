/**
 * The fake Data Plane API's runtime side for map routing: map files in its storage, runtime map entries,
 * runtime servers and the servers' stats, as the real API answers them (statuses and shapes recorded in
 * `test/fixtures/dataplaneapi/versions.md`). A reload (the fake's `reloads` moving) drops what was changed at
 * runtime only: servers come back as the configuration has them, map entries as the map file has them.
 */
type Obj = Record<string, unknown>;

export interface FakeRuntime {
  /** The configuration's backends as HAProxy loaded them at its last (re)load, with their servers. */
  config: Map<string, Record<string, Obj>>;
  /** Servers whose address HAProxy changed as it took a file (`X-Runtime-Actions: SetServerAddr`). */
  moved: Map<string, { address: string; port: number }>;
  /** Map files by stored name (the storage renames `a.b.map` to `a_b.map`). */
  storage: Map<string, string>;
  entries: Map<string, Map<string, string>>;
  /** Servers added at runtime, by backend, and `backend/server` removed at runtime. */
  added: Map<string, Map<string, { name: string; address: string; port: number; maint: boolean }>>;
  removed: Set<string>;
  /** `backend/server` whose delete is refused as if a stream were still open. */
  busy: Set<string>;
  /** The general storage's files by name; HAProxy loads the `.cfg` ones (a second `-f` of the directory). */
  general: Map<string, string>;
  /** The backends HAProxy loaded from those files at its last (re)load, with their servers. */
  loaded: Map<string, Obj & { name: string }>;
  /** Whether HAProxy is started with that `-f` (default true). */
  loadsGeneral: boolean;
  /** Stick tables' entries by table (the refusals table: slot -> gpc0), as a test sets them. */
  tables: Map<string, Map<string, number>>;
}

export function newFakeRuntime(): FakeRuntime {
  return {
    config: new Map(),
    moved: new Map(),
    storage: new Map(),
    entries: new Map(),
    added: new Map(),
    removed: new Set(),
    busy: new Set(),
    general: new Map(),
    loaded: new Map(),
    loadsGeneral: true,
    tables: new Map(),
  };
}

/** After a reload: what ran at runtime only is gone. */
export function reloadRuntime(rt: FakeRuntime): void {
  rt.added.clear();
  rt.removed.clear();
  rt.moved.clear();
  rt.entries.clear();
  for (const [name, text] of rt.storage) rt.entries.set(name, parseMap(text));
  rt.loaded.clear();
  if (rt.loadsGeneral)
    for (const [name, text] of rt.general) if (name.endsWith('.cfg')) loadBackends(text, rt.loaded);
}

/** The backends of a `-f` file, as HAProxy loads it. */
function loadBackends(text: string, into: Map<string, Obj & { name: string }>): void {
  for (const [name, servers] of backendsOfText(text)) into.set(name, { name, servers });
}

/** Every backend HAProxy runs: the configuration's, and those it loaded from the general storage's files. */
function runningBackends(rt: FakeRuntime): Map<string, Obj> {
  const out = new Map<string, Obj>();
  for (const [name, servers] of rt.config) out.set(name, { name, servers });
  for (const [name, b] of rt.loaded) out.set(name, b);
  return out;
}

/**
 * Each `backend` section of a configuration file and its servers (`server <name> <addr>:<port> [check]
 * [# <metadata JSON>]`), as HAProxy and the API read them: what a raw push or a `-f` file gives the fake.
 */
export function backendsOfText(text: string): Map<string, Record<string, Obj>> {
  const out = new Map<string, Record<string, Obj>>();
  const line = /^\s+server\s+(\S+)\s+(\S+):(\d+)(\s+check)?(?:\s+#\s+(\{.*\}))?\s*$/;
  let servers: Record<string, Obj> | undefined;
  for (const l of text.split('\n')) {
    if (/^[^\s#]/.test(l)) {
      const [kind, name] = l.trim().split(/\s+/);
      servers = kind === 'backend' && name ? {} : undefined;
      if (servers && name) out.set(name, servers);
      continue;
    }
    const m = servers ? line.exec(l) : null;
    if (!m || !servers) continue;
    const [, name, address, port, check, meta] = m as unknown as string[];
    servers[name as string] = {
      name,
      address: (address as string).replace(/^\[|\]$/g, ''),
      port: Number(port),
      ...(check ? { check: 'enabled' } : {}),
      ...(meta ? { metadata: JSON.parse(meta) } : {}),
    };
  }
  return out;
}

function parseMap(text: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const line of text.split('\n')) {
    const [k, v] = line.trim().split(/\s+/);
    if (k && v) out.set(k, v);
  }
  return out;
}

const stored = (name: string) => `${name.replace(/\.map$/, '').replace(/[^A-Za-z0-9_-]/g, '_')}.map`;
const mapList = (rt: FakeRuntime) =>
  [...rt.storage.keys()].map((n) => ({ storage_name: n, file: `/etc/haproxy/maps/${n}`, description: '' }));

/** `reload`: the request reloads HAProxy before it is answered (the fake's caller does it). */
/** `type`: the answer's `Content-Type` when not the fake's default (text/plain for a string, else JSON). */
export type Answer = { status: number; body: unknown; reload?: boolean; type?: string } | undefined;

/** The answer to a runtime/storage/stats request, or undefined when the path is not one of them. */
/** What the request asked for beyond its path and body: its `Accept`, and the API version the fake plays. */
export interface Asked {
  accept?: string;
  version?: string;
}

/**
 * `GET /storage/maps/{name}` as each version answers it (seen on the real binaries, 2026-12-04): v3.0.23 and
 * v3.2.15 pick the type from `Accept`: `application/json` listed first (axios' default
 * `application/json, text/plain, *\/*`) gets 200 `{}` as JSON (the open file encoded as JSON), otherwise
 * (`application/octet-stream`, `*\/*`) the text; v3.4 answers the text whatever is asked. `text/plain`
 * alone: 406 on all three.
 */
function storedMapAnswer(text: string, asked: Asked): Answer {
  const types = (asked.accept ?? '*/*').split(',').map((t) => t.split(';')[0]?.trim() ?? '');
  const served = ['application/octet-stream', 'application/json', '*/*'];
  if (!types.some((t) => served.includes(t)))
    return { status: 406, body: { code: 406, message: 'unsupported media type requested' } };
  const json = asked.version !== '3.4' && types.find((t) => served.includes(t)) === 'application/json';
  return json
    ? { status: 200, body: {}, type: 'application/json' }
    : { status: 200, body: text, type: 'application/octet-stream' };
}

export function runtimeRoute(
  rt: FakeRuntime,
  method: string,
  path: string,
  body: unknown,
  rawBody: string,
  query: URLSearchParams = new URLSearchParams(),
  asked: Asked = {},
): Answer {
  let m: RegExpExecArray | null;
  const backends = runningBackends(rt);
  const general = generalRoute(rt, method, path, rawBody, query, asked);
  if (general) return general;
  const table = /^\/services\/haproxy\/runtime\/stick_tables\/([^/]+)\/entries$/.exec(path);
  if (table && method === 'GET') {
    const entries = rt.tables.get(decodeURIComponent(table[1] as string));
    if (!entries) return { status: 404, body: { code: 404, message: 'stick table not found' } };
    return { status: 200, body: [...entries].map(([key, gpc0], i) => ({ id: `0x${i}`, key, gpc0, use: 0 })) };
  }
  if (path === '/services/haproxy/storage/maps') {
    if (method === 'GET') return { status: 200, body: mapList(rt) };
    const part = /filename="([^"]+)"[\s\S]*?\r\n\r\n([\s\S]*?)\r\n--/.exec(rawBody);
    if (method !== 'POST' || !part?.[1])
      return { status: 400, body: { code: 400, message: 'no file_upload' } };
    const name = stored(part[1]);
    if (rt.storage.has(name)) return { status: 409, body: { code: 409, message: 'file already exists' } };
    rt.storage.set(name, part[2] ?? '');
    return {
      status: 201,
      body: { storage_name: name, file: `/etc/haproxy/maps/${name}`, description: 'managed but not loaded' },
    };
  }
  // biome-ignore lint/suspicious/noAssignInExpressions: a small regex router, one match per branch
  if ((m = /^\/services\/haproxy\/storage\/maps\/([^/]+)$/.exec(path)) && method === 'PUT') {
    const name = m[1] as string;
    if (!rt.storage.has(name)) return { status: 404, body: { code: 404, message: 'not found' } };
    rt.storage.set(name, String(body ?? ''));
    return { status: 204, body: undefined };
  }
  // biome-ignore lint/suspicious/noAssignInExpressions: a small regex router, one match per branch
  if ((m = /^\/services\/haproxy\/storage\/maps\/([^/]+)$/.exec(path)) && method === 'GET') {
    const text = rt.storage.get(m[1] as string);
    if (text === undefined) return { status: 404, body: { code: 404, message: 'not found' } };
    return storedMapAnswer(text, asked);
  }
  // biome-ignore lint/suspicious/noAssignInExpressions: a small regex router, one match per branch
  if ((m = /^\/services\/haproxy\/runtime\/maps\/([^/]+)\/entries(?:\/([^/]+))?$/.exec(path))) {
    const name = m[1] as string;
    const entries = rt.entries.get(name);
    if (!entries) return { status: 404, body: { code: 404, message: `map ${name} not loaded` } };
    const key = m[2] === undefined ? undefined : decodeURIComponent(m[2]);
    // As the API does: the map file follows a runtime change only when asked (`force_sync`).
    const sync = () => {
      if (query.get('force_sync') === 'true')
        rt.storage.set(name, [...entries].map(([k, v]) => `${k} ${v}\n`).join(''));
    };
    if (method === 'GET' && key === undefined)
      return { status: 200, body: [...entries].map(([k, v], i) => ({ id: `0x${i}`, key: k, value: v })) };
    if (method === 'POST' && key === undefined) {
      const e = body as { key: string; value: string };
      entries.set(e.key, e.value);
      sync();
      return { status: 201, body: e };
    }
    if (key === undefined || !entries.has(key))
      return { status: 404, body: { code: 404, message: 'no entry' } };
    if (method === 'PUT') entries.set(key, (body as { value: string }).value);
    if (method === 'DELETE') entries.delete(key);
    sync();
    return method === 'DELETE'
      ? { status: 204, body: undefined }
      : { status: 200, body: { key, ...(body as Obj) } };
  }
  // biome-ignore lint/suspicious/noAssignInExpressions: a small regex router, one match per branch
  if ((m = /^\/services\/haproxy\/runtime\/backends\/([^/]+)\/servers(?:\/([^/]+))?$/.exec(path)))
    return runtimeServer(rt, backends, method, m[1] as string, m[2], body as Obj);
  if (method === 'GET' && path === '/services/haproxy/stats/native' && query.get('type') === 'backend') {
    const stats = [...backends.keys()].map((name) => ({ type: 'backend', name, stats: {} }));
    return { status: 200, body: [{ runtimeAPI: '/run/haproxy.sock', stats }] };
  }
  if (method === 'GET' && path === '/services/haproxy/stats/native') {
    const parent = query.get('parent');
    const stats = [...running(rt, backends)]
      .filter(([backend]) => parent === null || backend === parent)
      .flatMap(([backend, list]) =>
        list.map((s) => ({
          type: 'server',
          name: s.name,
          backend_name: backend,
          // A server whose delete the fake refuses carries a stream.
          stats: {
            addr: `${s.address}:${s.port}`,
            status: s.maint ? 'MAINT' : 'UP',
            scur: rt.busy.has(`${backend}/${s.name}`) ? 1 : 0,
          },
        })),
      );
    return { status: 200, body: [{ runtimeAPI: '/run/haproxy.sock', stats }] };
  }
  return undefined;
}

/** The general storage, as v3.0.23, v3.2.15 and v3.4 serve it (multipart uploads, `skip_reload`/`force_reload`). */
function generalRoute(
  rt: FakeRuntime,
  method: string,
  path: string,
  rawBody: string,
  query: URLSearchParams,
  asked: Asked,
): Answer {
  const part = () => /filename="([^"]+)"[\s\S]*?\r\n\r\n([\s\S]*?)\r\n--/.exec(rawBody);
  if (path === '/services/haproxy/storage/general') {
    if (method === 'GET')
      return { status: 200, body: [...rt.general.keys()].map((n) => ({ storage_name: n, file: `/g/${n}` })) };
    const p = part();
    if (method !== 'POST' || !p?.[1]) return { status: 400, body: { code: 400, message: 'no file_upload' } };
    if (rt.general.has(p[1])) return { status: 409, body: { code: 409, message: 'file already exists' } };
    rt.general.set(p[1], p[2] ?? '');
    return {
      status: 201,
      body: { storage_name: p[1], file: `/g/${p[1]}`, description: 'managed general use file' },
    };
  }
  const m = /^\/services\/haproxy\/storage\/general\/([^/]+)$/.exec(path);
  if (!m) return undefined;
  const name = decodeURIComponent(m[1] as string);
  if (!rt.general.has(name)) return { status: 404, body: { code: 404, message: 'file not found' } };
  // Negotiated as a stored map's text is (`storedMapAnswer`): seen the same on the real binaries.
  if (method === 'GET') return storedMapAnswer(rt.general.get(name) ?? '', asked);
  if (method === 'DELETE') {
    rt.general.delete(name);
    return { status: 204, body: undefined };
  }
  const p = part();
  if (method !== 'PUT' || !p) return { status: 400, body: { code: 400, message: 'no file_upload' } };
  rt.general.set(name, p[2] ?? '');
  if (query.get('skip_reload') === 'true') return { status: 204, body: undefined };
  return query.get('force_reload') === 'true'
    ? { status: 204, body: undefined, reload: true }
    : { status: 202, body: undefined, reload: true };
}

/** Every server HAProxy runs, by backend: the configuration's, changed at runtime. */
function running(rt: FakeRuntime, backends: Map<string, Obj>) {
  const out = new Map<string, Array<{ name: string; address: string; port: number; maint: boolean }>>();
  for (const [name, b] of backends) {
    const inFile = Object.values((b.servers ?? {}) as Record<string, Obj>)
      .filter((s) => !rt.removed.has(`${name}/${s.name}`))
      .map((s) => ({
        ...(rt.added.get(name)?.get(String(s.name)) ?? {
          name: String(s.name),
          address: String(s.address),
          port: Number(s.port),
          maint: false,
        }),
        ...rt.moved.get(`${name}/${String(s.name)}`),
      }));
    const extra = [...(rt.added.get(name)?.values() ?? [])].filter(
      (s) => !inFile.some((x) => x.name === s.name),
    );
    out.set(name, [...inFile, ...extra]);
  }
  return out;
}

function runtimeServer(
  rt: FakeRuntime,
  backends: Map<string, Obj>,
  method: string,
  backend: string,
  name: string | undefined,
  body: Obj,
): Answer {
  // As v3.4 answers it (v3.0.23: 500).
  if (!backends.has(backend))
    return { status: 404, body: { code: 404, message: `no data for ${backend}: not found` } };
  const list = running(rt, backends).get(backend) ?? [];
  if (method === 'GET' && name === undefined)
    return {
      status: 200,
      body: list.map((x) => ({
        name: x.name,
        address: x.address,
        port: x.port,
        admin_state: x.maint ? 'maint' : 'ready',
      })),
    };
  if (method === 'POST' && name === undefined) {
    if (list.some((s) => s.name === body.name))
      return { status: 409, body: { code: 409, message: 'exists' } };
    const s = {
      name: String(body.name),
      address: String(body.address),
      port: Number(body.port),
      maint: true,
    };
    rt.added.set(backend, (rt.added.get(backend) ?? new Map()).set(s.name, s));
    rt.removed.delete(`${backend}/${s.name}`);
    return { status: 201, body };
  }
  const s = list.find((x) => x.name === name);
  if (!s || name === undefined) return { status: 404, body: { code: 404, message: 'no server' } };
  const runtimeCopy = rt.added.get(backend)?.get(name) ?? { ...s };
  if (method === 'PUT') {
    runtimeCopy.maint = body.admin_state === 'maint';
    rt.added.set(backend, (rt.added.get(backend) ?? new Map()).set(name, runtimeCopy));
    return { status: 200, body: { ...runtimeCopy, admin_state: body.admin_state } };
  }
  if (method === 'DELETE') {
    if (!s.maint && !runtimeCopy.maint)
      return { status: 500, body: { code: 500, message: 'Server is not in maintenance' } };
    if (rt.busy.has(`${backend}/${name}`))
      return {
        status: 500,
        body: { code: 500, message: 'Server still has connections attached to it, cannot remove it.' },
      };
    rt.added.get(backend)?.delete(name);
    rt.removed.add(`${backend}/${name}`);
    return { status: 204, body: undefined };
  }
  return undefined;
}
