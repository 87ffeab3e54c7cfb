import { Ajv2019, type ValidateFunction } from 'ajv/dist/2019.js';
import addFormats from 'ajv-formats';

/**
 * Checks HTTP requests against an OpenAPI 3.0 document with Ajv (JSON Schema 2019-09): the path and method
 * must exist, every query and path parameter must be declared and of its type, required ones present, and
 * the JSON body must match the operation's schema with no unknown property.
 *
 * The Data Plane API's schemas compose objects with `allOf` and forbid extra properties in each part
 * (`additionalProperties: false`), which in JSON Schema would refuse every composed object. The intent — no
 * property outside the union of the parts — is JSON Schema's `unevaluatedProperties: false` on the composed
 * object, so parts are opened and the composed object closed.
 */
type Schema = Record<string, unknown>;
type Parameter = { name: string; in: string; required?: boolean; schema?: Schema; $ref?: string };
type Operation = {
  parameters?: Parameter[];
  requestBody?: { required?: boolean; content?: Record<string, { schema?: Schema }> };
};

function walk(node: unknown, visit: (schema: Schema) => void): void {
  if (Array.isArray(node)) {
    for (const n of node) walk(n, visit);
  } else if (node && typeof node === 'object') {
    visit(node as Schema);
    for (const v of Object.values(node)) walk(v, visit);
  }
}

export function normalizeSchemas(schemas: Record<string, Schema>): Record<string, Schema> {
  const out = structuredClone(schemas);
  const opened = new Set<string>();
  walk(out, (schema) => {
    const parts = schema.allOf as Schema[] | undefined;
    if (!Array.isArray(parts)) return;
    let closed = schema.additionalProperties === false;
    schema.allOf = parts.map((part) => {
      const ref = typeof part.$ref === 'string' ? part.$ref.split('/').pop() : undefined;
      if (ref) {
        if (out[ref]?.additionalProperties === false) closed = true;
        opened.add(ref);
        return { $ref: `#/components/schemas/${ref}__part` };
      }
      if (part.additionalProperties === false) closed = true;
      const { additionalProperties: _dropped, ...rest } = part;
      return rest;
    });
    delete schema.additionalProperties;
    if (closed) schema.unevaluatedProperties = false;
  });
  for (const name of opened) {
    const { additionalProperties, ...rest } = structuredClone(out[name] as Schema);
    out[`${name}__part`] = additionalProperties === false ? rest : { ...rest, additionalProperties };
  }
  return out;
}

export interface RequestToCheck {
  method: string;
  /** Path below the server URL (`/v3` removed), with its query string. */
  url: string;
  body: unknown;
}

export class OpenApiRequestValidator {
  private readonly ajv: Ajv2019;
  private readonly routes: Array<{ template: string; regex: RegExp; item: Record<string, Operation> }>;
  private readonly bodies = new Map<string, ValidateFunction>();

  constructor(
    private readonly spec: {
      paths: Record<string, Record<string, Operation>>;
      components: { schemas: Record<string, Schema>; parameters?: Record<string, Parameter> };
    },
  ) {
    this.ajv = new Ajv2019({ strict: false, allErrors: true, validateFormats: true, discriminator: false });
    addFormats.default(this.ajv);
    this.ajv.addSchema({ components: { schemas: normalizeSchemas(spec.components.schemas) } }, 'spec');
    this.routes = Object.entries(spec.paths).map(([template, item]) => ({
      template,
      regex: new RegExp(
        `^${template.replace(/[.*+?^$()|[\]\\]/g, '\\$&').replace(/\\?\{[^}]+\\?\}/g, '[^/]+')}$`,
      ),
      item,
    }));
  }

  private schemaRef(schema: Schema): Schema {
    return JSON.parse(JSON.stringify(schema).replaceAll('"#/components/', '"spec#/components/'));
  }

  /** Every problem with one request; empty when it is a request the document allows. */
  check(req: RequestToCheck): string[] {
    const url = new URL(req.url, 'http://x');
    const path = decodeURIComponent(url.pathname);
    // Literal paths win over templated ones (`/transactions` before `/{id}`).
    const candidates = this.routes.filter((r) => r.regex.test(url.pathname) || r.template === path);
    candidates.sort((a, b) => (a.template.includes('{') ? 1 : 0) - (b.template.includes('{') ? 1 : 0));
    const route = candidates[0];
    const where = `${req.method.toUpperCase()} ${req.url}`;
    if (!route) return [`${where}: no such path in the document`];
    const op = route.item[req.method.toLowerCase()];
    if (!op) return [`${where}: ${route.template} has no ${req.method.toUpperCase()}`];
    const problems: string[] = [];
    // Older documents (v3.0, v3.2) share parameters by reference.
    const parameters = (op.parameters ?? []).map(
      (p) => (p.$ref ? this.spec.components.parameters?.[p.$ref.split('/').pop() ?? ''] : p) ?? p,
    );
    const declared = new Map(parameters.filter((p) => p.in === 'query').map((p) => [p.name, p]));
    for (const [name, value] of url.searchParams) {
      const param = declared.get(name);
      if (!param) {
        problems.push(`${where}: query parameter ${name} is not declared`);
        continue;
      }
      const type = param.schema?.type;
      if (type === 'integer' && !/^-?[0-9]+$/.test(value))
        problems.push(`${where}: ${name} is not an integer`);
      if (type === 'boolean' && value !== 'true' && value !== 'false')
        problems.push(`${where}: ${name} is not a boolean`);
    }
    for (const p of parameters) {
      if (p.in === 'query' && p.required && !url.searchParams.has(p.name))
        problems.push(`${where}: required query parameter ${p.name} is missing`);
    }
    const content = op.requestBody?.content;
    if (req.body === undefined || req.body === null || req.body === '') {
      if (op.requestBody?.required) problems.push(`${where}: the body is required`);
    } else if (typeof req.body === 'string') {
      if (!content?.['text/plain']) problems.push(`${where}: a text body is not accepted`);
    } else {
      const schema = content?.['application/json']?.schema;
      if (!schema) {
        problems.push(`${where}: a JSON body is not accepted`);
      } else {
        const key = `${route.template} ${req.method}`;
        let validate = this.bodies.get(key);
        if (!validate) {
          validate = this.ajv.compile(this.schemaRef(schema));
          this.bodies.set(key, validate);
        }
        if (!validate(req.body)) {
          for (const e of validate.errors ?? [])
            problems.push(`${where}: body${e.instancePath} ${e.message} ${JSON.stringify(e.params)}`);
        }
      }
    }
    return problems;
  }
}
