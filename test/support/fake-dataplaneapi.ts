import { readFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { join } from 'node:path';
import { readSpec } from '../../scripts/generate-dataplaneapi.js';
import {
  backendsOfText,
  type FakeRuntime,
  newFakeRuntime,
  reloadRuntime,
  runtimeRoute,
} from './fake-dataplaneapi-runtime.js';
import { type FakeVersion, versionBehaviour } from './fake-dataplaneapi-versions.js';
import { OpenApiRequestValidator } from './openapi-validator.js';

/**
 * A small stand-in for the Data Plane API v3 on 127.0.0.1, for unit tests of the provider: the configuration
 * file as text (what `GET`/`POST /configuration/raw` read and push, versioned like the real one), HAProxy's
 * runtime side for map routing (`fake-dataplaneapi-runtime.ts`), the storages, and the transaction list the
 * provider sweeps at start; every request checked against the OpenAPI document of the version it stands in
 * for, and error answers replayed verbatim from the recorded exchanges (`exchanges-v3.4.0.json`). What the
 * real API does with a file it is given (its own head, its checks, a reload) is observed in
 * `test/fixtures/dataplaneapi/versions.md`; the real-API suite (`test/dataplaneapi`) is the proof.
 */
export { FAKE_VERSIONS, type FakeVersion } from './fake-dataplaneapi-versions.js';

export interface Exchange {
  note: string;
  request: { method: string; path: string; body: unknown };
  response: { status: number; headers: Record<string, string>; body: unknown };
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
  /** Set to also carry the request out before answering (e.g. a push whose reload then fails). */
  apply?: boolean;
}

export interface FakeTransaction {
  id: string;
  _version: number;
  status: 'in_progress' | 'success' | 'failed' | 'outdated';
}

export interface FakeDataplaneApi {
  url: string;
  username: string;
  password: string;
  /** Every request received, as `METHOD /path?query` (without `/v3`). */
  requests: string[];
  /** Requests the OpenAPI document does not allow. */
  violations: string[];
  /** The configuration file's text, without the head the API writes (`# _version=N`). */
  text: string;
  version(): number;
  /** Starts over from `text` (foreign sections, or ours), a new version, nothing run at runtime. */
  reset(text?: string): void;
  /** Another tool writes the file (a new version; HAProxy loads it only at the next reload). */
  write(text: string): void;
  /** A reload by someone else: HAProxy loads the files again, what ran at runtime only is gone. */
  reload(): void;
  inject(injection: Injection): void;
  /** Transactions, as `GET /services/haproxy/transactions` lists them (left by others, or by old releases). */
  transactions: FakeTransaction[];
  reloads: number;
  /** Pushes of the configuration with `skip_reload` (no reload). */
  pushes: number;
  /** Map files, runtime map entries and runtime servers (map routing). */
  runtime: FakeRuntime;
  /** Matching requests are carried out at once but answered `ms` later (a slow answer, e.g. a long parse). */
  slow: Array<{ method: string; path: RegExp; ms: number }>;
  spec: Record<string, unknown>;
  close(): Promise<void>;
}

export async function startFakeDataplaneApi(
  options: {
    version?: FakeVersion;
    spec?: Record<string, unknown>;
    /** HAProxy's version behind the API: below 3.0 its runtime servers cannot be driven through the API. */
    haproxy?: string;
    /** Where it listens (default 127.0.0.1, any free port): a stand-in for a pod's API at its pod IP. */
    host?: string;
    port?: number;
  } = {},
): Promise<FakeDataplaneApi> {
  const apiVersion = options.version ?? '3.4';
  const spec = options.spec ?? readSpec(apiVersion);
  const validator = new OpenApiRequestValidator(spec as never);
  const { info, unauthorized } = versionBehaviour(apiVersion, spec);
  const username = 'admin';
  const password = 'fake-password';
  let version = 1;
  let pid = 100;
  // The worker's start: its uptime grows as a real one's does (a constant one would tell the provider, after
  // 3 s, that another process runs).
  let startedAt = Date.now();
  const injections: Injection[] = [];
  const reload = () => {
    pid++;
    startedAt = Date.now();
    fake.reloads++;
    reloadRuntime(fake.runtime);
    fake.runtime.config = backendsOfText(fake.text);
  };
  const fake: FakeDataplaneApi = {
    url: '',
    username,
    password,
    requests: [],
    violations: [],
    text: '',
    version: () => version,
    reset(text = '') {
      fake.text = text;
      fake.transactions = [];
      fake.runtime = newFakeRuntime();
      fake.runtime.config = backendsOfText(text);
      fake.slow = [];
      version++;
    },
    write(text) {
      fake.text = text;
      version++;
    },
    reload,
    inject: (i) => injections.push(i),
    transactions: [],
    reloads: 0,
    pushes: 0,
    runtime: newFakeRuntime(),
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
    fake.requests.push(`${method} ${path}${url.search}`);
    const auth = req.headers.authorization ?? '';
    if (auth !== `Basic ${Buffer.from(`${username}:${password}`).toString('base64')}`)
      return send(
        res,
        401,
        { code: 401, message: auth ? unauthorized(auth) : 'missing or invalid authorization' },
        { 'Www-Authenticate': 'Basic realm="API"' },
      );
    const isText = String(req.headers['content-type'] ?? '').startsWith('text/plain');
    const isForm = String(req.headers['content-type'] ?? '').startsWith('multipart/form-data');
    const body: unknown = rawBody === '' || isForm ? undefined : isText ? rawBody : JSON.parse(rawBody);
    for (const problem of validator.check({ method, url: `${path}${url.search}`, body }))
      fake.violations.push(problem);
    const injected = injections.findIndex((i) => i.method === method && i.path.test(path));
    let replay: Exchange['response'] | undefined;
    if (injected >= 0) {
      const [i] = injections.splice(injected, 1);
      if (i && !i.apply) return send(res, i.answer.status, i.answer.body, withoutVersion(i.answer.headers));
      replay = i?.answer;
    }
    if (method === 'GET' && path === '/specification_openapiv3') return send(res, 200, spec);
    if (method === 'GET' && path === '/info') return send(res, 200, { api: { version: info }, system: {} });
    if (method === 'GET' && path === '/health') return send(res, 200, { haproxy: 'up' });
    if (method === 'GET' && path === '/services/haproxy/runtime/info')
      return send(res, 200, {
        info: {
          pid,
          uptime: Math.floor((Date.now() - startedAt) / 1000),
          version: options.haproxy ?? '3.0.11-1+deb13u5',
        },
      });
    if (method === 'GET' && path === '/services/haproxy/configuration/version')
      return send(res, 200, version);
    if (method === 'GET' && path === '/services/haproxy/configuration/raw') {
      // As the real API negotiates it: offered as JSON or text/plain (`Accept: application/octet-stream`
      // alone is 406 on v3.0.23, v3.2.15 and v3.4.0).
      const types = String(req.headers.accept ?? '*/*')
        .split(',')
        .map((t) => t.split(';')[0]?.trim() ?? '');
      if (!types.some((t) => ['text/plain', 'application/json', '*/*', 'text/*'].includes(t)))
        return error(
          res,
          406,
          'unsupported media type requested, only [application/json text/plain] are available',
        );
      return send(res, 200, `# _version=${version}\n${fake.text}`);
    }
    if (method === 'POST' && path === '/services/haproxy/configuration/raw') {
      const given = q.get('version');
      if (given !== null && Number(given) !== version)
        return error(
          res,
          409,
          `version mismatch: version in configuration file is ${version}, given version is ${given}`,
        );
      fake.text = String(body ?? '')
        .split('\n')
        .filter((l) => !/^# (_md5hash=|_version=)/.test(l))
        .join('\n');
      version++;
      const actions = String(req.headers['x-runtime-actions'] ?? '');
      if (q.get('skip_reload') === 'true') {
        fake.pushes++;
        for (const a of actions.split(';').filter(Boolean)) setServerAddr(fake.runtime, a);
      } else reload();
      if (replay) return send(res, replay.status, replay.body, withoutVersion(replay.headers));
      return send(res, 201, String(body ?? ''));
    }
    if (method === 'GET' && path === '/services/haproxy/transactions')
      return send(
        res,
        200,
        fake.transactions.map((t) => ({ ...t })),
      );
    const tx = /^\/services\/haproxy\/transactions\/([^/]+)$/.exec(path);
    if (tx && method === 'DELETE') {
      const before = fake.transactions.length;
      fake.transactions = fake.transactions.filter((t) => t.id !== tx[1]);
      return before === fake.transactions.length
        ? error(res, 404, 'transaction not found')
        : send(res, 204, undefined);
    }
    const answer = runtimeRoute(fake.runtime, method, path, body, rawBody, q, {
      accept: String(req.headers.accept ?? '*/*'),
      version: apiVersion,
    });
    if (answer?.reload) reload();
    if (answer)
      return send(res, answer.status, answer.body, answer.type ? { 'Content-Type': answer.type } : {});
    return error(res, 404, `the fake does not serve ${method} ${path}`);
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

/** `SetServerAddr <backend> <server> <address> <port>`: HAProxy moves the server as it takes the file. */
function setServerAddr(rt: FakeRuntime, action: string): void {
  const [verb, backend, server, address, port] = action.trim().split(/\s+/);
  if (verb !== 'SetServerAddr' || !backend || !server || !address || !port) return;
  rt.moved.set(`${backend}/${server}`, { address, port: Number(port) });
}

// A replayed answer carries the recorded Configuration-Version; the fake's own is the one that matters.
function withoutVersion(headers: Record<string, string>): Record<string, string> {
  const { 'Configuration-Version': _v, ...rest } = headers;
  return rest;
}
