import { Gauge, type GaugeConfiguration, type LabelValues, Registry } from 'prom-client';

type Format = (metric: unknown) => Promise<string>;

interface Series<T extends string> {
  labels: LabelValues<T>;
  value: number;
  /** The series' exposition line, formatted at the first scrape after it was set. */
  line?: string;
}

/**
 * A gauge of many series that seldom change: `route_backend_info`, one per cluster. prom-client formats
 * every label of every series at every scrape: 14-27 ms of the event loop and about 12 MB of garbage at
 * 5000 clusters, at each scrape, and a webhook arriving meanwhile waited. Here each series' line is
 * formatted once, by the registry's own formatter (`cachingRegistry`), at the first scrape after it was set,
 * and kept until it is set again or removed. Only `set`, `remove` and `reset` are taken.
 */
export class CachedLinesGauge<T extends string> extends Gauge<T> {
  private readonly series = new Map<string, Series<T>>();
  private readonly head: { name: string; help: string };

  constructor(config: GaugeConfiguration<T>) {
    super(config);
    this.head = { name: config.name, help: config.help };
  }

  override set(labels: LabelValues<T>, value: number): void;
  override set(value: number): void;
  override set(labelsOrValue: LabelValues<T> | number, value?: number): void {
    if (typeof labelsOrValue === 'number') throw new TypeError(`${this.head.name}: a series needs labels`);
    super.set(labelsOrValue, value as number);
    // Kept in the registry's order: a series set again keeps its place, as in prom-client's own map.
    const labels = { ...labelsOrValue };
    this.series.set(keyOf(labels), { labels, value: value as number });
  }

  override remove(...values: string[]): void;
  override remove(labels: LabelValues<T>): void;
  override remove(...args: [LabelValues<T>] | string[]): void {
    const [first] = args;
    if (typeof first !== 'object') throw new TypeError(`${this.head.name}: remove a series by its labels`);
    super.remove(first);
    this.series.delete(keyOf(first));
  }

  override reset(): void {
    super.reset();
    // prom-client's constructor resets too, before this class's fields exist.
    (this.series as Map<string, Series<T>> | undefined)?.clear();
  }

  override inc(): void {
    throw new TypeError(`${this.head.name}: only set, remove and reset`);
  }

  override dec(): void {
    throw new TypeError(`${this.head.name}: only set, remove and reset`);
  }

  /** The metric's text, as `format` (the registry's formatter) gives it, each series formatted once. */
  async exposition(format: Format): Promise<string> {
    const one = (values: Array<{ labels: LabelValues<T>; value: number }>) =>
      format({ get: async () => ({ ...this.head, type: 'gauge', values, aggregator: 'sum' }) });
    const parts = [await one([])];
    for (const s of this.series.values()) {
      if (s.line === undefined) {
        const text = await one([{ labels: s.labels, value: s.value }]);
        s.line = text.slice(text.lastIndexOf('\n') + 1);
      }
      parts.push(s.line);
    }
    return parts.join('\n');
  }
}

/** Label values may be numbers: `1` and `"1"` are one series to prom-client, and here. */
function keyOf(labels: Record<string, string | number | undefined>): string {
  return Object.keys(labels)
    .sort()
    .map((k) => `${k}\u0000${labels[k]}`)
    .join('\u0001');
}

/**
 * A registry whose `CachedLinesGauge`s give their kept lines. prom-client's `metrics()` formats each metric
 * with `getMetricsAsString` (not in its typings, stable in 15.x): the cached gauges go through it for each
 * new line, so that their text is what prom-client would print (`cached-lines.test.ts` compares them).
 */
export function cachingRegistry(): Registry {
  const registry = new Registry();
  const base = (Registry.prototype as unknown as { getMetricsAsString: Format }).getMetricsAsString;
  const format: Format = (metric) => base.call(registry, metric);
  (registry as unknown as { getMetricsAsString: Format }).getMetricsAsString = (metric) =>
    metric instanceof CachedLinesGauge ? metric.exposition(format) : format(metric);
  return registry;
}
