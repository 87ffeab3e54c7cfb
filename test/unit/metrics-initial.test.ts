import { describe, expect, it } from 'vitest';
import { createMetrics } from '../../src/metrics/metrics.js';

// Prometheus sees no increase() in a series that first appears at 1: a counter whose failed series only
// starts with the first failed reload would raise the reload alert one failure late, or never.
describe('metrics at start', () => {
  it('export every series of a fixed label set at 0 before anything happened', async () => {
    const text = await createMetrics().registry.metrics();
    const expected = [
      ...['changed', 'unchanged', 'failed'].map((r) => `reconciles_total{result="${r}"} 0`),
      ...['committed', 'conflict', 'failed'].map((r) => `transactions_total{result="${r}"} 0`),
      ...['succeeded', 'failed'].flatMap((r) =>
        ['pool_growth', 'structure', 'repair'].map((why) => `reloads_total{result="${r}",reason="${why}"} 0`),
      ),
      ...['missing_credentials', 'bad_credentials', 'stale_timestamp', 'replayed'].map(
        (r) => `webhook_auth_failures_total{reason="${r}"} 0`,
      ),
    ];
    for (const line of expected) expect(text).toContain(`kubebyon_haproxy_adapter_${line}\n`);
  });
});
