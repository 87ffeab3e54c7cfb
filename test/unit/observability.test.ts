import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { createMetrics } from '../../src/metrics/metrics.js';

// The dashboard and the alert rules may only use metrics the service really exports, and the rules must
// pass promtool's own checks and unit tests (deploy/prometheus/alerts.test.yaml).
const deploy = join(import.meta.dirname, '../../deploy');
const METRIC = /\b(?:kubebyon_haproxy_adapter|process|nodejs)_[a-z_]+\b/g;

async function exportedFamilies(): Promise<Set<string>> {
  const text = await createMetrics().registry.metrics();
  return new Set([...text.matchAll(/^# TYPE (\S+) /gm)].map((m) => m[1] ?? ''));
}

function referenced(text: string): string[] {
  // Histograms are exposed as <name>_bucket/_sum/_count under one family.
  return [...new Set(text.match(METRIC) ?? [])].map((m) => m.replace(/_(bucket|sum|count)$/, ''));
}

describe('dashboard and alert rules', () => {
  it('reference only metrics that /metrics exports', async () => {
    const families = await exportedFamilies();
    const dashboard = JSON.parse(readFileSync(join(deploy, 'grafana/dashboard.json'), 'utf8'));
    const exprs = dashboard.panels.flatMap((p: { targets: Array<{ expr: string }> }) =>
      p.targets.map((t) => t.expr),
    );
    const fromDashboard = referenced(exprs.join('\n'));
    const fromRules = referenced(readFileSync(join(deploy, 'prometheus/alerts.yaml'), 'utf8'));
    expect(fromDashboard.length).toBeGreaterThan(8);
    expect(fromRules.length).toBeGreaterThan(4);
    expect([...fromDashboard, ...fromRules].filter((m) => !families.has(m))).toEqual([]);
  });

  it('pass promtool check rules and promtool test rules', () => {
    const check = spawnSync('promtool', ['check', 'rules', join(deploy, 'prometheus/alerts.yaml')], {
      encoding: 'utf8',
    });
    expect(check.status, check.stdout + check.stderr).toBe(0);
    const test = spawnSync('promtool', ['test', 'rules', join(deploy, 'prometheus/alerts.test.yaml')], {
      encoding: 'utf8',
    });
    expect(test.status, test.stdout + test.stderr).toBe(0);
  });
});
