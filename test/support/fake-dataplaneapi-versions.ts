/**
 * How each Data Plane API version the fake stands in for behaved when observed
 * (`test/fixtures/dataplaneapi/versions.md`). Pure.
 */
export const FAKE_VERSIONS = ['3.0.23', '3.2.15', '3.4'] as const;
export type FakeVersion = (typeof FAKE_VERSIONS)[number];

type Section = Record<string, unknown>;

export interface VersionBehaviour {
  /** `/info`'s `api.version`. */
  info: string;
  /** What the API keeps of a body sent as `schema`: what its document declares. */
  kept<T>(body: T, schema: string): T;
  /** The message of a 401 for the `Authorization` header given. */
  unauthorized(auth: string): string;
  /** What becomes of the frontends each time the API writes the file again. */
  rewritten(frontends: Iterable<Section>): void;
}

export function versionBehaviour(version: FakeVersion, spec: Record<string, unknown>): VersionBehaviour {
  const schemas = (spec as { components: { schemas: Record<string, Schema> } }).components.schemas;
  return {
    info: `v${version === '3.4' ? '3.4.0' : version} fake`,
    kept: (body, schema) => pruneToSchema(structuredClone(body), { $ref: schema }, schemas) as typeof body,
    unauthorized(auth) {
      // v3.0.23 repeats the password it was given; later versions do not.
      const given = Buffer.from(auth.replace(/^Basic /, ''), 'base64')
        .toString()
        .split(':')
        .slice(1)
        .join(':');
      return version === '3.0.23' ? `invalid password: ${given}` : 'unauthorized';
    },
    rewritten(frontends) {
      // v3.2.15 doubles the comment of a tagged inspect delay at every write of the file.
      if (version !== '3.2.15') return;
      for (const f of frontends)
        for (const r of (f.tcp_request_rule_list ?? []) as Section[]) {
          if (r.type !== 'inspect-delay' || r.metadata === undefined) continue;
          const m = r.metadata as { comment?: unknown };
          const text = typeof m.comment === 'string' ? m.comment : JSON.stringify(m);
          r.metadata = { comment: `${text} # ${text}` };
        }
    },
  };
}

/**
 * What the Data Plane API keeps of a JSON body: its server decodes bodies into the types of its own document
 * and ignores fields the document does not declare (seen on v3.0.23: `metadata` on a frontend, bind or rule
 * is answered 202 and is gone when read back).
 */
type Schema = {
  $ref?: string;
  allOf?: Schema[];
  properties?: Record<string, Schema>;
  additionalProperties?: Schema | boolean;
  items?: Schema;
};

export function pruneToSchema(value: unknown, schema: Schema, schemas: Record<string, Schema>): unknown {
  const resolved = resolve(schema, schemas);
  if (Array.isArray(value)) {
    const items = resolved.items;
    return items ? value.map((v) => pruneToSchema(v, items, schemas)) : value;
  }
  if (!value || typeof value !== 'object') return value;
  const { properties, additional } = fields(resolved, schemas);
  const out: Record<string, unknown> = {};
  for (const [key, v] of Object.entries(value as Record<string, unknown>)) {
    const declared = properties[key];
    if (declared) out[key] = pruneToSchema(v, declared, schemas);
    // A map (binds, servers, metadata) keeps its keys; a struct drops what it does not declare.
    else if (Object.keys(properties).length === 0 && additional !== false)
      out[key] = typeof additional === 'object' ? pruneToSchema(v, additional, schemas) : v;
  }
  return out;
}

function resolve(schema: Schema, schemas: Record<string, Schema>, depth = 0): Schema {
  const name = schema.$ref?.split('/').pop();
  if (!name || depth > 10) return schema;
  return resolve(schemas[name] ?? {}, schemas, depth + 1);
}

function fields(
  schema: Schema,
  schemas: Record<string, Schema>,
): { properties: Record<string, Schema>; additional: Schema | boolean | undefined } {
  let properties: Record<string, Schema> = { ...schema.properties };
  let additional = schema.additionalProperties;
  for (const part of schema.allOf ?? []) {
    const f = fields(resolve(part, schemas), schemas);
    properties = { ...properties, ...f.properties };
    if (typeof f.additional === 'object') additional = f.additional;
  }
  return { properties, additional };
}
