import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { RETIRED_SETTINGS, SETTINGS, type Setting, type SettingGroup } from '../../src/config/settings.js';
import { createMetrics } from '../../src/metrics/metrics.js';

// The README's configuration and metrics tables must list exactly what the code has, with the real defaults.
const readme = readFileSync(join(import.meta.dirname, '../../README.md'), 'utf8');

const HEADINGS: Record<SettingGroup, string> = {
  required: 'Required',
  service: 'The service',
  haproxy: 'HAProxy',
  kubernetes: 'Kubernetes',
  fleet: 'Several instances and replicas',
  tuning: 'Tuning',
};

interface Row {
  heading: string;
  name: string;
  secret: boolean;
  default: string;
}

/** The rows of every table under `## Configuration`, with the `###` heading each sits under. */
function configurationRows(text: string): Row[] {
  const start = text.indexOf('\n## Configuration\n');
  const end = text.indexOf('\n## ', start + 1);
  const rows: Row[] = [];
  let heading = '';
  for (const line of text.slice(start, end).split('\n')) {
    if (line.startsWith('### ')) heading = line.slice(4).trim();
    const cells = line.split('|').map((c) => c.trim());
    const name = /^`(KUBEBYON_\w+)`( \/ `_FILE`)?$/.exec(cells[1] ?? '');
    if (line.startsWith('| `') && name?.[1]) {
      rows.push({ heading, name: name[1], secret: !!name[2], default: cells[2] ?? '' });
    }
  }
  return rows;
}

/** What the default column must say for a setting: its value in backquotes, or that there is none. */
function expectedDefault(_name: string, s: Setting): string[] {
  if (s.default !== '') return [`\`${s.default}\``];
  if (s.group === 'required') return ['— (required)'];
  return s.secret ? ['(none)', '— (required with `dataplaneapi`)'] : ['(none)'];
}

/** Every disagreement between the README's rows and the settings: none means the tables are true. */
function disagreements(rows: Row[], settings: Record<string, Setting>): string[] {
  const out: string[] = [];
  for (const [name, s] of Object.entries(settings)) {
    const mine = rows.filter((r) => r.name === name);
    if (mine.length !== 1) {
      out.push(`${name}: ${mine.length} rows`);
      continue;
    }
    const row = mine[0] as Row;
    if (!expectedDefault(name, s).includes(row.default))
      out.push(`${name}: default ${row.default}, code ${s.default}`);
    if (row.heading !== HEADINGS[s.group])
      out.push(`${name}: under "${row.heading}", not "${HEADINGS[s.group]}"`);
    if (row.secret !== !!s.secret) out.push(`${name}: _FILE ${row.secret ? 'listed' : 'missing'}`);
  }
  for (const r of rows) if (!(r.name in settings)) out.push(`${r.name}: documented but not read`);
  return out;
}

describe('README', () => {
  it('documents every setting once, under its group, with the default the code uses', () => {
    const rows = configurationRows(readme);
    expect(rows.length).toBe(Object.keys(SETTINGS).length);
    expect(disagreements(rows, SETTINGS)).toEqual([]);
  });

  it('names every retired setting, and documents none of them in a table', () => {
    const rows = configurationRows(readme);
    for (const name of Object.keys(RETIRED_SETTINGS)) {
      expect(readme, name).toContain(`\`${name}\``);
      expect(rows.map((r) => r.name)).not.toContain(name);
    }
  });

  it('catches the wrong default the earlier check let through (ROUTING said `rules`, the code `map`)', () => {
    // The row as README.md had it at a653034, and the code's default then.
    const old =
      '\n## Configuration\n\n| variable | default | meaning |\n| - | - | - |\n' +
      '| `KUBEBYON_HAPROXY_ROUTING`                | `rules`                                           | `map`: one SNI map and a pool of slot backends, so clusters come and go without a reload; `rules`: one backend and one `use_backend` rule per cluster (every change reloads) |\n\n## Next\n';
    const code = { KUBEBYON_HAPROXY_ROUTING: { group: 'haproxy', default: 'map' } } as const;
    // The earlier check: the row merely contains the default somewhere.
    const row = old.split('\n').find((l) => l.startsWith('| `KUBEBYON_HAPROXY_ROUTING`'));
    expect(row).toContain('`map`');
    // This one reads the default column.
    expect(disagreements(configurationRows(old), code)).toContain(
      'KUBEBYON_HAPROXY_ROUTING: default `rules`, code map',
    );
  });

  it('lists every metric the service exports', async () => {
    const text = await createMetrics().registry.metrics();
    const ours = [...text.matchAll(/^# TYPE (kubebyon_\S+) /gm)].map((m) => m[1]);
    expect(ours.length).toBeGreaterThan(5);
    for (const name of ours) expect(readme).toContain(`| \`${name}\``);
  });
});
