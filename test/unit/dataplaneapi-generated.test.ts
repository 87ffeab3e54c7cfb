import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { basename } from 'node:path';
import { describe, expect, it } from 'vitest';
import { GENERATED_DIR, generateTypes, specFiles } from '../../scripts/generate-dataplaneapi.js';

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
});
