import { initInstanceSeries, type Metrics } from './metrics.js';

/** The metrics of passes and of HAProxy: with several instances, each series names its instance. */
const PER_INSTANCE = [
  'reconciles',
  'reconcilePasses',
  'reconcileDuration',
  'reconcilePhaseDuration',
  'transactions',
  'reloads',
  'providerRequests',
  'providerBytes',
  'routes',
  'rejectedRoutes',
  'driftCorrections',
  'routeBackendInfo',
  'slotPoolSize',
  'slotPoolFree',
  'lastSuccess',
] as const satisfies ReadonlyArray<keyof Metrics>;

type Labels = Record<string, string | number>;
type AnyFn = (...args: unknown[]) => unknown;

export interface InstanceMetrics {
  metrics: Metrics;
  /** Removes every series this view wrote (an instance that went away leaves no stale series). */
  dispose(): void;
}

/**
 * The root metrics as one HAProxy instance's loop and provider see them: the same objects, with
 * `haproxy=<instance>` added to every label set they write. The loop's code stays unaware of instances.
 */
export function instanceMetrics(root: Metrics, instance: string): InstanceMetrics {
  const extra = { haproxy: instance };
  const written = new Map<string, Map<string, Labels>>();
  const view = { ...root } as Record<string, unknown>;
  for (const key of PER_INSTANCE) {
    const seen = new Map<string, Labels>();
    written.set(key, seen);
    view[key] = bind(root[key] as unknown as Record<string, AnyFn>, extra, seen);
  }
  view.beforeScrape = {
    instances: root.beforeScrape.instances,
    set hook(fn: (() => void) | undefined) {
      if (fn) root.beforeScrape.instances.set(instance, fn);
      else root.beforeScrape.instances.delete(instance);
    },
    get hook() {
      return root.beforeScrape.instances.get(instance);
    },
    // The fleet reads every instance's refusals at once: one hook, the root's.
    get refusals() {
      return root.beforeScrape.refusals;
    },
    set refusals(fn: (() => Promise<void>) | undefined) {
      root.beforeScrape.refusals = fn;
    },
  };
  const metrics = view as unknown as Metrics;
  initInstanceSeries(metrics, {});
  return {
    metrics,
    dispose() {
      root.beforeScrape.instances.delete(instance);
      for (const key of PER_INSTANCE) {
        const metric = root[key] as unknown as { remove(labels: Labels): void };
        for (const labels of written.get(key)?.values() ?? []) metric.remove(labels);
      }
    },
  };
}

/** A metric whose writes carry `extra` too; each label set written is kept for `dispose`. */
function bind(metric: Record<string, AnyFn>, extra: Labels, seen: Map<string, Labels>): unknown {
  const labelled = (args: unknown[]): unknown[] => {
    const first = args[0];
    const labels =
      typeof first === 'object' && first !== null ? { ...(first as Labels), ...extra } : { ...extra };
    seen.set(JSON.stringify(labels), labels);
    return typeof first === 'object' && first !== null ? [labels, ...args.slice(1)] : [labels, ...args];
  };
  return new Proxy(metric, {
    get(target, prop) {
      const value = target[prop as string];
      if (typeof value !== 'function') return value;
      switch (prop) {
        case 'inc':
        case 'dec':
        case 'set':
        case 'observe':
        case 'startTimer':
          return (...args: unknown[]) => value.apply(target, labelled(args));
        case 'remove':
          return (labels: Labels) => value.call(target, { ...labels, ...extra });
        case 'reset':
          // Resetting would drop every instance's series, not this one's.
          throw new Error('a per-instance metric cannot be reset; remove its series instead');
        default:
          return value.bind(target);
      }
    },
  });
}
