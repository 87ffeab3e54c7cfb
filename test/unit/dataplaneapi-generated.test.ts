import { existsSync, readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { findSharedSpec, GENERATED_FILE, generateTypes } from '../../scripts/generate-dataplaneapi.js';

const spec = findSharedSpec();

describe('generated Data Plane API types', () => {
  it('exist in the repository', () => {
    expect(existsSync(GENERATED_FILE)).toBe(true);
  });

  it.skipIf(spec === undefined)(
    'equal a fresh generation from the shared spec (run `npm run generate` after changing it)',
    async () => {
      const fresh = await generateTypes(JSON.parse(readFileSync(spec as string, 'utf8')));
      // Compared as booleans first so that a mismatch does not print a megabyte of diff.
      const same = readFileSync(GENERATED_FILE, 'utf8') === fresh;
      expect(same, `generated/dataplaneapi.d.ts differs from a generation of ${spec}`).toBe(true);
    },
    60_000,
  );
});

if (spec === undefined) {
  console.warn(
    'skipping the freshness check of generated/dataplaneapi.d.ts: no shared/dataplaneapi/openapi-v3.4.json beside the clone',
  );
}
