/**
 * Whether a Data Plane API can store the ownership tags this service relies on, read off the API's own
 * OpenAPI document (a locally built API reports its version as `dev`, so the version number proves nothing).
 * Pure: takes the document, names what is missing.
 */
const NEEDS_METADATA: Array<[schema: string, what: string]> = [
  ['frontend_base', 'frontends'],
  ['backend_base', 'backends'],
  ['server', 'servers'],
  ['bind', 'binds'],
  ['backend_switching_rule', 'backend switching rules'],
  ['tcp_request_rule', 'tcp-request rules'],
];

type SchemaMap = Record<string, { properties?: Record<string, unknown>; allOf?: unknown[] } | undefined>;

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

/** What the API lacks for this service, in words; empty when it has everything. */
export function missingCapabilities(spec: unknown): string[] {
  const doc = (spec ?? {}) as {
    paths?: Record<string, unknown>;
    components?: { schemas?: SchemaMap };
  };
  const schemas = doc.components?.schemas ?? {};
  const missing: string[] = [];
  const noMetadata = NEEDS_METADATA.filter(([schema]) => !hasProperty(schemas, schema, 'metadata')).map(
    ([, what]) => what,
  );
  if (noMetadata.length > 0)
    missing.push(`\`metadata\` on ${noMetadata.join(', ')} (ownership tags; Data Plane API v3.2 or newer)`);
  const paths = doc.paths ?? {};
  for (const path of [
    '/services/haproxy/transactions',
    '/services/haproxy/configuration/backends',
    '/services/haproxy/configuration/frontends/{parent_name}/backend_switching_rules',
    '/services/haproxy/reloads/{id}',
  ]) {
    if (!(path in paths)) missing.push(`the endpoint ${path}`);
  }
  return missing;
}
