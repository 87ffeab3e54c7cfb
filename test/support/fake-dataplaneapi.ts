import { readFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { join } from 'node:path';
import { readSpec } from '../../scripts/generate-dataplaneapi.js';
import { type FakeVersion, versionBehaviour } from './fake-dataplaneapi-versions.js';
import { OpenApiRequestValidator } from './openapi-validator.js';

/**
 * A small stand-in for the Data Plane API v3 on 127.0.0.1, for unit tests of the provider: a model of the
 * behaviour the shared notes record (versions, transactions, outdated commits, full_section, metadata, the
 * runtime path), every request checked against the OpenAPI document of the version it stands in for, and
 * error answers replayed verbatim from the recorded exchanges (`exchanges-v3.4.0.json`). It behaves as that
 * version did when observed (`test/fixtures/dataplaneapi/versions.md`): it keeps only what the version's
 * document declares (v3.0.23 drops `metadata` from frontends, backends, binds and rules), and v3.2.15 doubles
 * the comment of a tagged `tcp-request inspect-delay` at every write of the file.
 */
export { FAKE_VERSIONS, type FakeVersion } from './fake-dataplaneapi-versions.js';

import {
  backendsOfText,
  type FakeRuntime,
  newFakeRuntime,
  reloadRuntime,
  runtimeRoute,
} from './fake-dataplaneapi-runtime.js';

export interface Exchange {
  note: string;
  request: { method: string; path: string; body: unknown };
  response: { status: number; headers: Record<string, string>; body: unknown };
}

type Obj = Record<string, unknown> & { name: string };
interface Config {
  frontends: Map<string, Obj>;
  backends: Map<string, Obj>;
}
interface Tx {
  version: number;
  status: 'in_progress' | 'success' | 'failed' | 'outdated';
  config: Config;
}

/** Recorded on a real API, beside what was observed of each version (`versions.md` there). */
export const FIXTURES = join(import.meta.dirname, '..', 'fixtures', 'dataplaneapi');

export function loadExchanges(): Exchange[] {
  return JSON.parse(readFileSync(join(FIXTURES, 'exchanges-v3.4.0.json'), 'utf8')) as Exchange[];
}

export interface Injection {
  method: string;
  /** Matched against the path without `/v3` and without the query. */
  path: RegExp;
  /** The recorded answer to give instead (once). */
  answer: Exchange['response'];
  /** Set to also apply the request before answering (e.g. a commit that succeeds but whose reload fails). */
  apply?: boolean;
}

export interface FakeDataplaneApi {
  url: string;
  username: string;
  password: string;
  /** Every request received, as `METHOD /path?query` (without `/v3`). */
  requests: string[];
  /** Requests the OpenAPI document does not allow. */
  violations: string[];
  config: Config;
  version(): number;
  openTransactions(): string[];
  inject(injection: Injection): void;
  /** Objects (raw JSON) to start from: foreign ones, or ours. */
  reset(config: { frontends?: Obj[]; backends?: Obj[] }): void;
  /** A reload by someone else: HAProxy loads the files again, what ran at runtime only is gone. */
  reload(): void;
  /** Runtime server changes (no reload) and reloads so far. */
  runtimeChanges: number;
  reloads: number;
  /** Map files, runtime map entries and runtime servers (map routing). */
  runtime: FakeRuntime;
  /** The text last pushed to `POST /configuration/raw`. */
  rawPushed: string | undefined;
  /** Matching requests are applied at once but answered `ms` later (a slow answer, e.g. a long parse). */
  slow: Array<{ method: string; path: RegExp; ms: number }>;
  spec: Record<string, unknown>;
  close(): Promise<void>;
}

const clone = <T>(v: T): T => structuredClone(v);
const copyConfig = (c: Config): Config => ({ frontends: clone(c.frontends), backends: clone(c.backends) });

export async function startFakeDataplaneApi(
  options: {
    version?: FakeVersion;
    spec?: Record<string, unknown>;
    maxOpenTransactions?: number;
    /** Where it listens (default 127.0.0.1, any free port): a stand-in for a pod's API at its pod IP. */
    host?: string;
    port?: number;
  } = {},
): Promise<FakeDataplaneApi> {
  const apiVersion = options.version ?? '3.4';
  const spec = options.spec ?? readSpec(apiVersion);
  const validator = new OpenApiRequestValidator(spec as never);
  const { info, kept, unauthorized, rewritten } = versionBehaviour(apiVersion, spec);
  const username = 'admin';
  const password = 'fake-password';
  let version = 1;
  let pid = 100;
  let txCounter = 0;
  const transactions = new Map<string, Tx>();
  const injections: Injection[] = [];
  const fake: FakeDataplaneApi = {
    url: '',
    username,
    password,
    requests: [],
    violations: [],
    config: { frontends: new Map(), backends: new Map() },
    version: () => version,
    openTransactions: () => [...transactions].filter(([, t]) => t.status === 'in_progress').map(([id]) => id),
    inject: (i) => injections.push(i),
    reset(c) {
      fake.config = {
        frontends: new Map((c.frontends ?? []).map((f) => [f.name, clone(f)])),
        backends: new Map((c.backends ?? []).map((b) => [b.name, clone(b)])),
      };
      transactions.clear();
      fake.runtime = newFakeRuntime();
      fake.rawPushed = undefined;
      fake.slow = [];
      version++;
    },
    reload() {
      pid++;
      fake.reloads++;
      reloadRuntime(fake.runtime);
    },
    runtimeChanges: 0,
    reloads: 0,
    runtime: newFakeRuntime(),
    rawPushed: undefined,
    slow: [],
    spec,
    close: async () => {},
  };

  const send = (res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}) => {
    const text =
      body === undefined || body === null ? '' : typeof body === 'string' ? body : JSON.stringify(body);
    res.writeHead(status, {
      'Configuration-Version': String(version),
      ...(typeof body === 'string'
        ? { 'Content-Type': 'text/plain' }
        : { 'Content-Type': 'application/json' }),
      ...headers,
    });
    res.end(text);
  };
  const error = (res: ServerResponse, status: number, message: string) =>
    send(res, status, { code: status, message });

  function handle(req: IncomingMessage, res: ServerResponse, rawBody: string) {
    const url = new URL(req.url ?? '/', 'http://x');
    const method = req.method ?? 'GET';
    const path = url.pathname.replace(/^\/v3/, '');
    const q = url.searchParams;
    const slow = fake.slow.find((x) => x.method === method && x.path.test(path));
    if (slow) {
      const end = res.end.bind(res) as (...args: unknown[]) => ServerResponse;
      res.end = ((...args: unknown[]) => {
        setTimeout(() => end(...args), slow.ms);
        return res;
      }) as typeof res.end;
    }
    const requestLine = `${method} ${path}${url.search}`;
    fake.requests.push(requestLine);
    const auth = req.headers.authorization ?? '';
    if (auth !== `Basic ${Buffer.from(`${username}:${password}`).toString('base64')}`) {
      return send(
        res,
        401,
        { code: 401, message: auth ? unauthorized(auth) : 'missing or invalid authorization' },
        {
          'Www-Authenticate': 'Basic realm="API"',
        },
      );
    }
    const isText = String(req.headers['content-type'] ?? '').startsWith('text/plain');
    const isForm = String(req.headers['content-type'] ?? '').startsWith('multipart/form-data');
    const body: unknown = rawBody === '' || isForm ? undefined : isText ? rawBody : JSON.parse(rawBody);
    for (const problem of validator.check({ method, url: `${path}${url.search}`, body }))
      fake.violations.push(problem);

    const injected = injections.findIndex((i) => i.method === method && i.path.test(path));
    let replay: Exchange['response'] | undefined;
    if (injected >= 0) {
      const [i] = injections.splice(injected, 1);
      if (i && !i.apply) {
        return send(res, i.answer.status, i.answer.body, withoutVersion(i.answer.headers));
      }
      replay = i?.answer;
    }

    const txId = q.get('transaction_id');
    const tx = txId ? transactions.get(txId) : undefined;
    if (txId && tx?.status !== 'in_progress') return error(res, 404, `transaction ${txId} not found`);
    const target = tx ? tx.config : fake.config;
    const bumpOutside = () => {
      if (tx) return;
      const v = q.get('version');
      if (v !== null && Number(v) !== version) throw Object.assign(new Error('version'), { status: 409 });
      version++;
      rewritten(fake.config.frontends.values());
    };
    const m = (re: RegExp) => re.exec(path);
    let match: RegExpExecArray | null;
    try {
      if (method === 'GET' && path === '/specification_openapiv3') return send(res, 200, spec);
      if (method === 'GET' && path === '/info') return send(res, 200, { api: { version: info }, system: {} });
      if (method === 'GET' && path === '/health') return send(res, 200, { haproxy: 'up' });
      if (method === 'GET' && path === '/services/haproxy/runtime/info')
        return send(res, 200, { info: { pid } });
      if (method === 'GET' && path === '/services/haproxy/configuration/version')
        return send(res, 200, version);
      if (method === 'GET' && path === '/services/haproxy/configuration/raw')
        return send(res, 200, `# _version=${version}\n${fake.rawPushed ?? rawOf(fake.config)}`);
      if (method === 'POST' && path === '/services/haproxy/configuration/raw') {
        bumpOutside();
        fake.rawPushed = String(body ?? '').replace(/^# _version=\d+\n/, '');
        // The real API parses what it is given: what later lists, transactions and reloads start from.
        serversFromRaw(fake.rawPushed, fake.config);
        if (q.get('skip_reload') !== 'true') {
          pid++;
          fake.reloads++;
          reloadRuntime(fake.runtime);
        }
        return send(res, 201, String(body ?? ''));
      }
      // biome-ignore lint/suspicious/noAssignInExpressions: a small regex router, one match per branch
      if (method === 'GET' && (match = m(/^\/services\/haproxy\/configuration\/(frontends|backends)$/))) {
        return send(res, 200, [...target[match[1] as 'frontends' | 'backends'].values()].map(clone));
      }
      if (method === 'POST' && path === '/services/haproxy/transactions') {
        const v = Number(q.get('version'));
        if (v !== version)
          return error(
            res,
            409,
            `version mismatch: version in configuration file is ${version}, given version is ${v}`,
          );
        if (fake.openTransactions().length >= (options.maxOpenTransactions ?? 20))
          return error(
            res,
            429,
            'cannot start a new transaction, reached the maximum amount of 20 active transactions',
          );
        const id = `00000000-0000-4000-8000-${String(++txCounter).padStart(12, '0')}`;
        transactions.set(id, { version, status: 'in_progress', config: copyConfig(fake.config) });
        return send(res, 201, { _version: version, id, status: 'in_progress' });
      }
      // biome-ignore lint/suspicious/noAssignInExpressions: a small regex router, one match per branch
      if ((match = m(/^\/services\/haproxy\/transactions\/([^/]+)$/))) {
        const id = match[1] as string;
        const t = transactions.get(id);
        if (!t) return error(res, 404, `transaction ${id} not found`);
        if (method === 'DELETE') {
          transactions.delete(id);
          return send(res, 204, undefined);
        }
        if (method === 'GET') return send(res, 200, { id, status: t.status });
        if (method === 'PUT') {
          if (t.status !== 'in_progress') return error(res, 406, `transaction ${id} is not in progress`);
          if (t.version !== version) {
            t.status = 'outdated';
            return error(res, 406, `transaction ${id} is outdated and cannot be committed`);
          }
          fake.config = t.config;
          t.status = 'success';
          transactions.delete(id);
          version++;
          rewritten(fake.config.frontends.values());
          if (replay) return send(res, replay.status, replay.body, withoutVersion(replay.headers));
          pid++;
          fake.reloads++;
          reloadRuntime(fake.runtime);
          if (q.get('force_reload') === 'true')
            return send(res, 200, { _version: t.version, id, status: 'success' });
          return send(
            res,
            202,
            { _version: t.version, id, status: 'success' },
            { 'Reload-Id': `2026-12-02-${fake.reloads}` },
          );
        }
      }
      // biome-ignore lint/suspicious/noAssignInExpressions: a small regex router, one match per branch
      if (method === 'GET' && (match = m(/^\/services\/haproxy\/reloads\/(.+)$/))) {
        if (replay) return send(res, replay.status, replay.body);
        return send(res, 200, { id: match[1], status: 'succeeded', response: '' });
      }
      // biome-ignore lint/suspicious/noAssignInExpressions: a small regex router, one match per branch
      if ((match = m(/^\/services\/haproxy\/configuration\/(frontends|backends)(?:\/([^/]+))?$/))) {
        const kind = match[1] as 'frontends' | 'backends';
        const name = match[2];
        const items = target[kind];
        const schema = kind === 'frontends' ? 'frontend' : 'backend';
        if (method === 'POST' && !name) {
          const o = kept(body as Obj, schema);
          if (items.has(o.name))
            return error(res, 409, `object already exists: ${kind.slice(0, -1)} ${o.name} already exists`);
          bumpOutside();
          items.set(o.name, clone(o));
          return send(res, tx ? 202 : 201, o);
        }
        if (!name || !items.has(name)) return error(res, 404, `missing object: ${name} does not exist`);
        if (method === 'GET') return send(res, 200, clone(items.get(name)));
        if (method === 'PUT') {
          bumpOutside();
          const o = kept(body as Obj, schema);
          items.set(name, clone(o));
          return send(res, tx ? 202 : 200, o);
        }
        if (method === 'DELETE') {
          bumpOutside();
          items.delete(name);
          return send(res, tx ? 202 : 204, undefined);
        }
      }
      if (
        method === 'PUT' &&
        // biome-ignore lint/suspicious/noAssignInExpressions: a small regex router, one match per branch
        (match = m(/^\/services\/haproxy\/configuration\/frontends\/([^/]+)\/backend_switching_rules$/))
      ) {
        const f = target.frontends.get(match[1] as string);
        if (!f) return error(res, 404, 'missing object: frontend');
        bumpOutside();
        const rules = kept(body, 'backend_switching_rules');
        f.backend_switching_rule_list = clone(rules);
        return send(res, tx ? 202 : 200, rules);
      }
      if (
        method === 'PUT' &&
        // biome-ignore lint/suspicious/noAssignInExpressions: a small regex router, one match per branch
        (match = m(/^\/services\/haproxy\/configuration\/backends\/([^/]+)\/servers\/([^/]+)$/))
      ) {
        const b = target.backends.get(match[1] as string);
        const servers = (b?.servers ?? {}) as Record<string, Obj>;
        const key = Object.keys(servers).find((k) => servers[k]?.name === match?.[2]);
        if (!b || !key) return error(res, 404, 'missing object: server');
        bumpOutside();
        const server = kept(body as Obj, 'server');
        servers[key] = clone(server);
        if (tx) return send(res, 202, server);
        fake.runtimeChanges++;
        return send(res, 200, server);
      }
      // HAProxy runs the configuration's backends and those it loaded from the general storage's files.
      const runs = new Map([...fake.config.backends, ...fake.runtime.loaded]);
      const answer = runtimeRoute(fake.runtime, runs, method, path, body, rawBody, q);
      if (answer?.reload) {
        pid++;
        fake.reloads++;
        reloadRuntime(fake.runtime);
      }
      if (answer) return send(res, answer.status, answer.body);
      return error(res, 404, `the fake does not serve ${method} ${path}`);
    } catch (err) {
      const status = (err as { status?: number }).status;
      if (status === 409)
        return error(res, 409, `version mismatch: version in configuration file is ${version}`);
      return error(res, 500, String(err));
    }
  }

  const server: Server = createServer((req, res) => {
    let raw = '';
    req.setEncoding('utf8');
    req.on('data', (c: string) => {
      raw += c;
    });
    req.on('end', () => handle(req, res, raw));
  });
  const host = options.host ?? '127.0.0.1';
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, host, () => resolve());
  });
  const address = server.address();
  if (address === null || typeof address === 'string') throw new Error('no port');
  fake.url = `http://${host}:${address.port}`;
  fake.close = () =>
    new Promise((resolve) => {
      server.closeAllConnections();
      server.close(() => resolve());
    });
  return fake;
}

/** A minimal file for the raw path: one section per backend with its servers. */
function rawOf(config: Config): string {
  const lines: string[] = [];
  for (const [name, b] of config.backends) {
    lines.push(`backend ${name}`, '  mode tcp');
    for (const s of Object.values((b.servers ?? {}) as Record<string, Obj>))
      lines.push(
        `  server ${s.name} ${s.address}:${s.port}${s.check === 'enabled' ? ' check' : ''}${s.metadata ? ` # ${JSON.stringify(s.metadata)}` : ''}`,
      );
    lines.push('');
  }
  return lines.join('\n');
}

/** The servers of each backend the fake holds, as a pushed file gives them; other sections as they are held. */
function serversFromRaw(text: string, config: Config): void {
  for (const [name, servers] of backendsOfText(text)) {
    const b = config.backends.get(name);
    if (b) b.servers = servers;
  }
}

// A replayed answer carries the recorded Configuration-Version; the fake's own is the one that matters.
function withoutVersion(headers: Record<string, string>): Record<string, string> {
  const { 'Configuration-Version': _v, ...rest } = headers;
  return rest;
}
