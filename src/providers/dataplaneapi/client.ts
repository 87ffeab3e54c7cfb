import { Agent as HttpAgent } from 'node:http';
import { Agent as HttpsAgent } from 'node:https';
import { Readable } from 'node:stream';
import axios, { type AxiosInstance, type AxiosResponse, isAxiosError } from 'axios';
import type * as v3_0 from '../../../generated/dataplaneapi-v3.0.23.js';
import type * as v3_2 from '../../../generated/dataplaneapi-v3.2.15.js';
import type * as v3_4 from '../../../generated/dataplaneapi-v3.4.js';

/**
 * A small typed client over axios in the style of openapi-fetch: the path, its parameters, the request body
 * and the response body all come from the types generated from the Data Plane API's own OpenAPI documents
 * (`npm run generate`, one per supported version). Nothing here restates an API type by hand.
 */

/** The paths every supported version serves, typed as the newest has them: a path v3.0 lacks does not compile. */
type paths = Pick<v3_4.paths, keyof v3_4.paths & keyof v3_2.paths & keyof v3_0.paths>;
/** Objects as the newest supported version describes them (older ones hold a subset: see `tags.ts`). */
export type Schemas = v3_4.components['schemas'];
/** Each supported version's own objects, for what differs between them. */
export type SchemasV3_0 = v3_0.components['schemas'];
export type SchemasV3_2 = v3_2.components['schemas'];
type Method = 'get' | 'put' | 'post' | 'delete';

/** Paths that have method M. */
export type PathWith<M extends Method> = {
  [P in keyof paths]: paths[P] extends Record<M, infer O>
    ? O extends { responses: unknown }
      ? P
      : never
    : never;
}[keyof paths];

type Op<P extends keyof paths, M extends Method> = paths[P] extends Record<M, infer O> ? O : never;
type ParamsOf<O> = O extends { parameters: infer X } ? Pick<X, Extract<keyof X, 'query' | 'path'>> : never;
type RequiredKeys<T> = { [K in keyof T]-?: Record<string, never> extends Pick<T, K> ? never : K }[keyof T];
/** A text body may also be buffers, sent one after another as they are (a large file, never joined). */
type BodyOf<O> = O extends { requestBody: { content: { 'application/json': infer B } } }
  ? B
  : O extends { requestBody: { content: { 'text/plain': infer T } } }
    ? T | TextChunks
    : never;

/** A text body as buffers: at least one (an empty array stays a JSON body). */
export type TextChunks = readonly [Buffer, ...Buffer[]];

function isTextChunks(body: unknown): body is TextChunks {
  return Array.isArray(body) && body.length > 0 && body.every((b) => Buffer.isBuffer(b));
}
type ResponsesOf<O> = O extends { responses: infer R } ? R : never;
type ContentOf<R> = R extends { content: { 'application/json': infer B } }
  ? B
  : R extends { content: { 'text/plain': infer T } }
    ? T
    : undefined;
type SuccessCode = 200 | 201 | 202 | 204;

/** The answers an operation documents for success, discriminated by status. */
export type Success<O> = {
  [S in Extract<keyof ResponsesOf<O>, SuccessCode>]: {
    status: S;
    data: ContentOf<ResponsesOf<O>[S]>;
    /** Lower-cased header names. */
    headers: Record<string, string>;
  };
}[Extract<keyof ResponsesOf<O>, SuccessCode>];

export type RequestInit<O> = ([RequiredKeys<ParamsOf<O>>] extends [never]
  ? { params?: ParamsOf<O> }
  : { params: ParamsOf<O> }) &
  ([BodyOf<O>] extends [never] ? { body?: never } : { body: BodyOf<O> }) & {
    signal?: AbortSignal;
    /** Overrides the client's timeout (a commit with `force_reload` lasts as long as the reload). */
    timeoutMs?: number;
    /** Header parameters the operation documents (e.g. `X-Runtime-Actions`). */
    headers?: Record<string, string>;
    /** The answer's body as text, whatever its content type says (a stored file's content). */
    text?: boolean;
  };

/** The API answered with a status its operation does not call success. `message` is the API's own. */
export class DataplaneHttpError extends Error {
  override readonly name = 'DataplaneHttpError';
  constructor(
    readonly status: number,
    readonly apiMessage: string,
    readonly headers: Record<string, string>,
    readonly method: string,
    readonly path: string,
  ) {
    super(`${method.toUpperCase()} ${path}: ${status} ${apiMessage}`);
  }
}

/** No answer at all (refused, reset, timed out): the API or the network is down. */
export class DataplaneUnreachableError extends Error {
  override readonly name = 'DataplaneUnreachableError';
}

export interface ClientOptions {
  /** The API's root, e.g. `http://127.0.0.1:5555`; `/v3` is added. */
  url: string;
  username: string;
  password: string;
  timeoutMs: number;
  /** Called once per request sent, for the requests count of an apply. */
  onRequest?: (method: string, path: string) => void;
  /** Called with the size of each request body sent and each answer body received. */
  onBytes?: (direction: 'sent' | 'received', n: number) => void;
}

export interface DataplaneClient {
  GET<P extends PathWith<'get'>>(path: P, init?: RequestInit<Op<P, 'get'>>): Promise<Success<Op<P, 'get'>>>;
  POST<P extends PathWith<'post'>>(
    path: P,
    init: RequestInit<Op<P, 'post'>>,
  ): Promise<Success<Op<P, 'post'>>>;
  PUT<P extends PathWith<'put'>>(path: P, init: RequestInit<Op<P, 'put'>>): Promise<Success<Op<P, 'put'>>>;
  DELETE<P extends PathWith<'delete'>>(
    path: P,
    init: RequestInit<Op<P, 'delete'>>,
  ): Promise<Success<Op<P, 'delete'>>>;
  /**
   * A multipart upload of one file (`POST /services/haproxy/storage/maps`, field `file_upload`; the general
   * storage's create and replace likewise): the operations whose body is not JSON or text.
   */
  upload(
    path:
      | '/services/haproxy/storage/maps'
      | '/services/haproxy/storage/general'
      | '/services/haproxy/storage/general/{name}',
    file: { field: string; name: string; content: string },
    init?: {
      signal?: AbortSignal;
      /** `put` replaces a stored file (`/storage/general/{name}`); `post` (the default) creates one. */
      method?: 'post' | 'put';
      params?: { path?: Record<string, string>; query?: Record<string, unknown> };
      timeoutMs?: number;
    },
  ): Promise<{ status: number; data: unknown; headers: Record<string, string> }>;
  /** The API root without `/v3`, for messages. */
  readonly url: string;
  close(): void;
}

/** `/backends/{name}` with `{name: "a b"}` -> `/backends/a%20b`; every placeholder must be given. */
export function fillPath(template: string, params: Record<string, unknown> | undefined): string {
  return template.replace(/\{([^}]+)\}/g, (_, key: string) => {
    const value = params?.[key];
    if (value === undefined || value === null || value === '')
      throw new Error(`missing path parameter ${key}`);
    return encodeURIComponent(String(value));
  });
}

function lowerHeaders(headers: unknown): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries((headers ?? {}) as Record<string, unknown>)) {
    if (v !== undefined && v !== null) out[k.toLowerCase()] = Array.isArray(v) ? v.join(', ') : String(v);
  }
  return out;
}

function messageOf(data: unknown): string {
  if (typeof data === 'string') return data.trim();
  if (data && typeof data === 'object' && 'message' in data)
    return String((data as { message: unknown }).message);
  return data === undefined || data === null ? '' : JSON.stringify(data);
}

export function createClient(options: ClientOptions): DataplaneClient {
  const base = options.url.replace(/\/+$/, '');
  // Keep-alive: a pass is a handful of requests in a row to the same local API.
  const httpAgent = new HttpAgent({ keepAlive: true, maxSockets: 4 });
  const httpsAgent = new HttpsAgent({ keepAlive: true, maxSockets: 4 });
  const http: AxiosInstance = axios.create({
    baseURL: `${base}/v3`,
    auth: { username: options.username, password: options.password },
    timeout: options.timeoutMs,
    httpAgent,
    httpsAgent,
    // Statuses are the caller's business; only "no answer" throws in axios.
    validateStatus: () => true,
    maxContentLength: 256 * 1024 * 1024,
    maxRedirects: 0,
    // The API's config dump can be large; no proxy from the environment may see credentials.
    proxy: false,
  });

  async function send(
    method: Method,
    template: string,
    init: RequestInit<unknown> | undefined,
    form?: FormData,
  ) {
    const params = init?.params as
      | { query?: Record<string, unknown>; path?: Record<string, unknown> }
      | undefined;
    const path = fillPath(template, params?.path);
    init?.signal?.throwIfAborted();
    options.onRequest?.(method, path);
    // Serialized here, once, so that the bytes sent can be counted. Buffers are streamed as they are: a
    // 2.6 MB allow map joined into one string for every list change made the service collect its old
    // generation every tenth change (bench/results/networks.md).
    const body: unknown = init?.body;
    const chunks = isTextChunks(body) ? body : undefined;
    const text =
      form !== undefined || chunks !== undefined || body === undefined
        ? undefined
        : typeof body === 'string'
          ? body
          : JSON.stringify(body);
    const length = chunks
      ? chunks.reduce((n, b) => n + b.length, 0)
      : text === undefined
        ? undefined
        : Buffer.byteLength(text);
    if (length !== undefined) options.onBytes?.('sent', length);
    const data = chunks ? Readable.from(chunks, { objectMode: false }) : text;
    let res: AxiosResponse<unknown>;
    try {
      res = await http.request<unknown>({
        method,
        url: path,
        ...(params?.query ? { params: params.query } : {}),
        ...(data !== undefined ? { data } : form !== undefined ? { data: form } : {}),
        ...(init?.signal ? { signal: init.signal } : {}),
        timeout: init?.timeoutMs ?? options.timeoutMs,
        headers: {
          // Text: a stored file's content (v3.0.23 and v3.2.15 answer `{}` as JSON to axios' JSON-first
          // default) or the raw configuration (offered as JSON or text/plain only: octet-stream alone is 406).
          ...(init?.text ? { Accept: 'application/octet-stream, text/plain' } : {}),
          ...init?.headers,
          // axios sets the multipart boundary itself.
          ...(form !== undefined
            ? {}
            : {
                'Content-Type': typeof init?.body === 'string' || chunks ? 'text/plain' : 'application/json',
              }),
          // A stream's length is not known to axios: without it the body would go chunked.
          ...(chunks ? { 'Content-Length': String(length) } : {}),
        },
        // Text answers (the raw configuration) stay text.
        transformResponse: (body: unknown, headers) => {
          if (typeof body === 'string') options.onBytes?.('received', Buffer.byteLength(body));
          return typeof body === 'string' &&
            !init?.text &&
            String(headers?.['content-type'] ?? '').includes('json') &&
            body !== ''
            ? JSON.parse(body)
            : body;
        },
      });
    } catch (err) {
      if (init?.signal?.aborted) throw init.signal.reason;
      const detail = isAxiosError(err) ? (err.code ?? err.message) : String(err);
      throw new DataplaneUnreachableError(
        `Data Plane API at ${base} did not answer ${method.toUpperCase()} ${path}: ${detail}`,
      );
    }
    const headers = lowerHeaders(res.headers);
    if (res.status >= 200 && res.status < 300) {
      return { status: res.status, data: res.status === 204 ? undefined : res.data, headers };
    }
    // v3.0.23 answers a wrong password with `invalid password: <the password>`: such words are not kept.
    const refused = res.status === 401 || res.status === 403;
    const message = refused ? 'the credentials were refused' : messageOf(res.data);
    throw new DataplaneHttpError(res.status, message, headers, method, path);
  }

  return {
    url: base,
    // The casts only bridge the generic signature to the one untyped transport above.
    GET: (path, init) => send('get', path, init as RequestInit<unknown>) as never,
    POST: (path, init) => send('post', path, init as RequestInit<unknown>) as never,
    PUT: (path, init) => send('put', path, init as RequestInit<unknown>) as never,
    DELETE: (path, init) => send('delete', path, init as RequestInit<unknown>) as never,
    upload(path, file, init) {
      const form = new FormData();
      form.append(file.field, new Blob([file.content], { type: 'text/plain' }), file.name);
      options.onBytes?.('sent', Buffer.byteLength(file.content));
      const { method = 'post', ...rest } = init ?? {};
      return send(method, path, rest as never, form);
    },
    close() {
      httpAgent.destroy();
      httpsAgent.destroy();
    },
  };
}

/** The `Configuration-Version` an answer carries, if any. */
export function versionOf(headers: Record<string, string>): number | undefined {
  const raw = headers['configuration-version'];
  if (raw === undefined || !/^[0-9]+$/.test(raw.trim())) return undefined;
  return Number(raw.trim());
}
