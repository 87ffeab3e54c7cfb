import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { basename } from 'node:path';
import { describe, expect, expectTypeOf, it } from 'vitest';
import { GENERATED_DIR, generateTypes, specFiles } from '../../scripts/generate-dataplaneapi.js';
import type { Schemas, SchemasV3_0, SchemasV3_2 } from '../../src/providers/dataplaneapi/client.js';

const files = specFiles();

describe('generated Data Plane API types', () => {
  it('come from the documents kept in specs/dataplaneapi, one file per supported version', () => {
    expect(files.map((f) => f.version)).toEqual(['3.0.23', '3.2.15', '3.4']);
    const generated = readdirSync(GENERATED_DIR).filter((n) => n.startsWith('dataplaneapi'));
    expect(generated.sort()).toEqual(files.map((f) => basename(f.generated)).sort());
    for (const f of files) expect(existsSync(f.generated), f.generated).toBe(true);
  });

  for (const f of files) {
    it(`v${f.version}: equal a fresh generation from its document (run \`npm run generate\` after changing it)`, async () => {
      const source = `specs/dataplaneapi/openapi-v${f.version}.json`;
      const fresh = await generateTypes(JSON.parse(readFileSync(f.spec, 'utf8')), source);
      // Compared as booleans first so that a mismatch does not print a megabyte of diff.
      const same = readFileSync(f.generated, 'utf8') === fresh;
      expect(same, `${f.generated} differs from a generation of ${source}`).toBe(true);
    }, 60_000);
  }

  it('say what capability.ts reads off the documents: where each version can keep tags', () => {
    // Checked by the compiler (tsc), so a regenerated document that disagrees stops the build of the tests.
    expectTypeOf<SchemasV3_0['frontend_base']>().not.toHaveProperty('metadata');
    expectTypeOf<SchemasV3_0['backend_base']>().not.toHaveProperty('metadata');
    expectTypeOf<SchemasV3_0['bind']>().not.toHaveProperty('metadata');
    expectTypeOf<SchemasV3_0['backend_switching_rule']>().not.toHaveProperty('metadata');
    expectTypeOf<SchemasV3_0['tcp_request_rule']>().not.toHaveProperty('metadata');
    expectTypeOf<SchemasV3_0['server']>().toHaveProperty('metadata');
    expectTypeOf<SchemasV3_0['frontend_base']>().toHaveProperty('description');
    expectTypeOf<SchemasV3_0['backend_base']>().toHaveProperty('description');
    for (const s of [{} as SchemasV3_2, {} as Schemas]) {
      expectTypeOf(s.frontend_base).toHaveProperty('metadata');
      expectTypeOf(s.backend_base).toHaveProperty('metadata');
      expectTypeOf(s.bind).toHaveProperty('metadata');
      expectTypeOf(s.backend_switching_rule).toHaveProperty('metadata');
      expectTypeOf(s.tcp_request_rule).toHaveProperty('metadata');
      expectTypeOf(s.server).toHaveProperty('metadata');
    }
  });
});
