import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { normative, SPEC_DIR } from '../../scripts/generate-dataplaneapi.js';

describe('the stored Data Plane API documents', () => {
  it('drop examples and x-go-* extensions, but keep a property that happens to be called example', () => {
    const doc = {
      components: {
        schemas: {
          rule: {
            type: 'object',
            example: { cond_test: '{ src 203.0.113.0/24 }' },
            'x-go-type-import': { path: 'example.invalid/models' },
            properties: { example: { type: 'string', example: 'x' }, name: { type: 'string' } },
          },
        },
      },
    };
    expect(normative(doc)).toEqual({
      components: {
        schemas: {
          rule: { type: 'object', properties: { example: { type: 'string' }, name: { type: 'string' } } },
        },
      },
    });
  });

  it('are stored that way: applying it again changes nothing', () => {
    for (const v of ['3.0.23', '3.2.15', '3.4']) {
      const doc = JSON.parse(readFileSync(join(SPEC_DIR, `openapi-v${v}.json`), 'utf8'));
      expect(normative(doc), v).toEqual(doc);
    }
  });
});
