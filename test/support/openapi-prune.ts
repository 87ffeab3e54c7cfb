/**
 * What the Data Plane API keeps of a JSON body: its server decodes bodies into the types of its own document
 * and ignores fields the document does not declare (seen on v3.0.23: `metadata` on a frontend, bind or rule
 * is answered 202 and is gone when read back). Pure.
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
