import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ENV_DEFAULTS, SECRET_VARS } from '../../src/config/env.js';
import { createMetrics } from '../../src/metrics/metrics.js';

// The README's configuration and metrics tables must list exactly what the code has, with the real defaults.
const readme = readFileSync(join(import.meta.dirname, '../../README.md'), 'utf8');

describe('README', () => {
  it('documents every configuration variable with its default', () => {
    for (const [name, value] of Object.entries(ENV_DEFAULTS)) {
      const row = readme.split('\n').find((l) => l.startsWith(`| \`${name}\``));
      expect(row, name).toBeDefined();
      expect(row, name).toContain(value === '' ? '(none)' : `\`${value}\``);
    }
    for (const name of SECRET_VARS) expect(readme).toContain(`| \`${name}\` / \`_FILE\``);
  });

  it('lists every metric the service exports', async () => {
    const text = await createMetrics().registry.metrics();
    const ours = [...text.matchAll(/^# TYPE (kubebyon_\S+) /gm)].map((m) => m[1]);
    expect(ours.length).toBeGreaterThan(5);
    for (const name of ours) expect(readme).toContain(`| \`${name}\``);
  });
});
