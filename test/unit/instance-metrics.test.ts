import { describe, expect, it } from 'vitest';
import { instanceMetrics } from '../../src/metrics/instance-metrics.js';
import { createMetrics, type Metrics, runBeforeScrape } from '../../src/metrics/metrics.js';

// One HAProxy instance's view of the shared metrics: what a scrape shows with several instances.

type Series = { labels: Record<string, string | number>; value: number };

async function series(metric: { get(): Promise<{ values: Series[] }> | { values: Series[] } }) {
  return (await metric.get()).values;
}

/** Every sample line of the scrape that carries `haproxy="<instance>"`. */
async function scrapedLines(root: Metrics, instance: string): Promise<string[]> {
  const text = await root.registry.metrics();
  return text.split('\n').filter((l) => !l.startsWith('#') && l.includes(`haproxy="${instance}"`));
}

describe('instanceMetrics', () => {
  it('adds haproxy="<instance>" to every write of a pass or HAProxy metric', async () => {
    const root = createMetrics({ perInstance: true });
    const a = instanceMetrics(root, 'a').metrics;
    a.reconciles.inc({ result: 'changed' });
    a.routes.set({ state: 'applied' }, 3);
    a.slotPoolSize.set(64);
    a.reconcileDuration.observe(0.2);
    const end = a.reconcilePhaseDuration.startTimer({ phase: 'plan' });
    end();
    a.driftCorrections.inc();

    expect(await series(root.reconciles)).toContainEqual({
      labels: { result: 'changed', haproxy: 'a' },
      value: 1,
    });
    expect(await series(root.routes)).toEqual([{ labels: { state: 'applied', haproxy: 'a' }, value: 3 }]);
    expect(await series(root.slotPoolSize)).toEqual([{ labels: { haproxy: 'a' }, value: 64 }]);
    expect(await series(root.driftCorrections)).toEqual([{ labels: { haproxy: 'a' }, value: 1 }]);
    const lines = await scrapedLines(root, 'a');
    expect(lines).toContainEqual(
      expect.stringMatching(/^kubebyon_haproxy_adapter_reconcile_duration_seconds_count\{.*\} 1$/),
    );
    expect(lines).toContainEqual(
      expect.stringMatching(
        /^kubebyon_haproxy_adapter_reconcile_phase_duration_seconds_count\{phase="plan",haproxy="a"\} 1$/,
      ),
    );
    // The rest is the root's, unlabelled.
    expect(instanceMetrics(root, 'b').metrics.webhookRequests).toBe(root.webhookRequests);
  });

  it('leaves the unlabelled zero series out in perInstance mode; each view has its own', async () => {
    const single = createMetrics();
    expect(await series(single.reconciles)).toContainEqual({ labels: { result: 'failed' }, value: 0 });

    const root = createMetrics({ perInstance: true });
    expect(await series(root.reconciles)).toEqual([]);
    expect(await series(root.reloads)).toEqual([]);
    instanceMetrics(root, 'a');
    instanceMetrics(root, 'b');
    const reconciles = await series(root.reconciles);
    expect(reconciles.every((s) => s.labels.haproxy === 'a' || s.labels.haproxy === 'b')).toBe(true);
    expect(reconciles.filter((s) => s.labels.haproxy === 'b').map((s) => [s.labels.result, s.value])).toEqual(
      [
        ['changed', 0],
        ['unchanged', 0],
        ['failed', 0],
      ],
    );
    // Every reload outcome and reason, per instance, from the start.
    expect((await series(root.reloads)).filter((s) => s.labels.haproxy === 'a')).toHaveLength(6);
    expect(await series(root.transactions)).toContainEqual({
      labels: { result: 'conflict', haproxy: 'b' },
      value: 0,
    });
  });

  it('dispose() removes the instance`s series, and only them', async () => {
    const root = createMetrics({ perInstance: true });
    const a = instanceMetrics(root, 'a');
    const b = instanceMetrics(root, 'b');
    for (const view of [a, b]) {
      view.metrics.reconciles.inc({ result: 'changed' });
      view.metrics.routes.set({ state: 'applied' }, 2);
      view.metrics.routeBackendInfo.set({ cluster: 'demo', host: 'demo.example.com', backend: 'slot_1' }, 1);
      view.metrics.reconcileDuration.observe(0.1);
      view.metrics.lastSuccess.set(1_700_000_000);
    }
    root.webhookRequests.inc({ method: 'PUT', route: '/v1/clusters/:name', status: '200' });
    const bBefore = await scrapedLines(root, 'b');
    expect(await scrapedLines(root, 'a')).toHaveLength(bBefore.length);

    a.dispose();
    expect(await scrapedLines(root, 'a')).toEqual([]);
    expect(await scrapedLines(root, 'b')).toEqual(bBefore);
    expect(await series(root.webhookRequests)).toEqual([
      { labels: { method: 'PUT', route: '/v1/clusters/:name', status: '200' }, value: 1 },
    ]);
  });

  it('removes through the view only the instance`s own series, and refuses a reset', async () => {
    const root = createMetrics({ perInstance: true });
    const a = instanceMetrics(root, 'a').metrics;
    const b = instanceMetrics(root, 'b').metrics;
    a.rejectedRoutes.set({ reason: 'host_taken' }, 1);
    b.rejectedRoutes.set({ reason: 'host_taken' }, 1);
    a.rejectedRoutes.remove({ reason: 'host_taken' });
    expect(await series(root.rejectedRoutes)).toEqual([
      { labels: { reason: 'host_taken', haproxy: 'b' }, value: 1 },
    ]);
    expect(() => a.routeBackendInfo.reset()).toThrow(/cannot be reset/);
  });

  it('runs each instance`s beforeScrape hook once per scrape, until it is removed or disposed', async () => {
    const root = createMetrics({ perInstance: true });
    const a = instanceMetrics(root, 'a');
    const b = instanceMetrics(root, 'b');
    const ran: string[] = [];
    root.beforeScrape.hook = () => ran.push('root');
    a.metrics.beforeScrape.hook = () => ran.push('a');
    b.metrics.beforeScrape.hook = () => ran.push('b');
    // Setting one view's hook replaces none of the others'.
    expect(root.beforeScrape.hook).toBeTypeOf('function');
    await runBeforeScrape(root);
    expect(ran.sort()).toEqual(['a', 'b', 'root']);

    ran.length = 0;
    b.metrics.beforeScrape.hook = undefined;
    await runBeforeScrape(root);
    expect(ran.sort()).toEqual(['a', 'root']);

    ran.length = 0;
    b.metrics.beforeScrape.hook = () => ran.push('b');
    a.dispose();
    await runBeforeScrape(root);
    expect(ran.sort()).toEqual(['b', 'root']);
    expect(a.metrics.beforeScrape.hook).toBeUndefined();
  });
});
