/**
 * What a Data Plane API can do for this service, read off the API's own OpenAPI document (a locally built API
 * reports its version as `dev`, so the version number proves nothing). Pure: takes the document, says where
 * ownership tags can be kept and whether files of its general storage can be read back, or names what is
 * missing.
 *
 * | document        | frontends, backends | servers            | binds, rules          |
 * | --------------- | ------------------- | ------------------ | --------------------- |
 * | v3.2, v3.4      | `metadata`          | `metadata`         | `metadata`            |
 * | v3.0 (v3.0.23)  | `description`       | `metadata`         | none: known by shape  |
 * | without either  | refused             |                    |                       |
 */

/** Where frontends and backends keep their tags (see `tags.ts`). */
export type Ownership = 'metadata' | 'description';

export interface TagStore {
  ownership: Ownership;
  /** Servers carry tags of their own (`metadata`); else a server is read as its backend's. */
  serverTags: boolean;
}

export interface Capabilities extends TagStore {
  /** The document's `info.version`, e.g. `3.0`. */
  document: string;
  /**
   * `GET /storage/general/{name}` answers the file's text: the slots files can be read back. Every
   * document with that path (v3.0.23, v3.2.15 and v3.4 checked on the real binaries, asked for
   * `application/octet-stream`: v3.0.23 and v3.2.15 answer `{}` as JSON when JSON is preferred).
   */
  generalFiles: boolean;
}

export type CapabilityCheck = { ok: true; capabilities: Capabilities } | { ok: false; missing: string[] };

/** The schemas whose objects this service tags, and what they are called in messages. */
const TAGGED: Array<[schema: string, what: string]> = [
  ['frontend_base', 'frontends'],
  ['backend_base', 'backends'],
  ['server', 'servers'],
  ['bind', 'binds'],
  ['backend_switching_rule', 'backend switching rules'],
  ['tcp_request_rule', 'tcp-request rules'],
];

/** What the provider uses: the configuration as text, and HAProxy's runtime (servers, map entries, stats). */
const ENDPOINTS = [
  '/services/haproxy/configuration/version',
  '/services/haproxy/configuration/raw',
  '/services/haproxy/runtime/info',
  '/services/haproxy/runtime/backends/{parent_name}/servers',
  '/services/haproxy/runtime/backends/{parent_name}/servers/{name}',
  '/services/haproxy/runtime/maps/{parent_name}/entries',
  '/services/haproxy/runtime/maps/{parent_name}/entries/{id}',
  '/services/haproxy/runtime/stick_tables/{parent_name}/entries',
  '/services/haproxy/stats/native',
  '/services/haproxy/storage/maps',
  '/services/haproxy/storage/maps/{name}',
];

type SchemaMap = Record<string, { properties?: Record<string, unknown>; allOf?: unknown[] } | undefined>;
type Parameter = { name?: string; $ref?: string };
type Doc = {
  info?: { version?: string };
  paths?: Record<string, Record<string, { parameters?: Parameter[] }> | undefined>;
  components?: { schemas?: SchemaMap; parameters?: Record<string, Parameter> };
};

function hasProperty(schemas: SchemaMap, name: string, property: string, depth = 0): boolean {
  const schema = schemas[name];
  if (!schema || depth > 5) return false;
  if (schema.properties && property in schema.properties) return true;
  for (const part of schema.allOf ?? []) {
    const p = part as { $ref?: string; properties?: Record<string, unknown> };
    if (p.properties && property in p.properties) return true;
    const ref = p.$ref?.split('/').pop();
    if (ref && hasProperty(schemas, ref, property, depth + 1)) return true;
  }
  return false;
}

/** The names of an operation's parameters, `$ref`s resolved. */
function parameterNames(doc: Doc, path: string, method: string): Set<string> {
  const params = doc.paths?.[path]?.[method]?.parameters ?? [];
  return new Set(
    params.map((p) => p.name ?? doc.components?.parameters?.[p.$ref?.split('/').pop() ?? '']?.name ?? ''),
  );
}

/** What the API can do for this service, or what it lacks, in words. */
export function readCapabilities(spec: unknown): CapabilityCheck {
  const doc = (spec ?? {}) as Doc;
  const schemas = doc.components?.schemas ?? {};
  const missing: string[] = [];
  const noMetadata = TAGGED.filter(([schema]) => !hasProperty(schemas, schema, 'metadata')).map(
    ([, what]) => what,
  );
  const described = ['frontend_base', 'backend_base'].every((s) => hasProperty(schemas, s, 'description'));
  if (noMetadata.length > 0 && !described)
    missing.push(
      `a place for ownership tags: \`metadata\` on ${noMetadata.join(', ')} (v3.2 or newer), or \`description\` on frontends and backends (v3.0)`,
    );
  for (const path of ENDPOINTS) if (!doc.paths?.[path]) missing.push(`the endpoint ${path}`);
  const raw = parameterNames(doc, '/services/haproxy/configuration/raw', 'post');
  for (const p of ['version', 'skip_reload', 'force_reload', 'X-Runtime-Actions'])
    if (!raw.has(p)) missing.push(`the parameter ${p} of POST /services/haproxy/configuration/raw`);
  if (missing.length > 0) return { ok: false, missing };
  return {
    ok: true,
    capabilities: {
      document: doc.info?.version ?? 'unknown',
      ownership: noMetadata.length === 0 ? 'metadata' : 'description',
      serverTags: hasProperty(schemas, 'server', 'metadata'),
      generalFiles: doc.paths?.['/services/haproxy/storage/general/{name}'] !== undefined,
    },
  };
}

/** The ownership mechanism, in words, for the start log. */
export function describeCapabilities(caps: Capabilities): string {
  return caps.ownership === 'metadata'
    ? `ownership tags in \`metadata\` on every object (OpenAPI document ${caps.document})`
    : `ownership tags in the \`description\` of frontends and backends, ${
        caps.serverTags ? 'in `metadata` on servers' : 'servers owned through their backend'
      } (OpenAPI document ${caps.document})`;
}
