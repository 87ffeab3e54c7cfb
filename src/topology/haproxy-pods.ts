import { CoreV1Api, type KubeConfig, type ListWatch, type V1Pod } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import { slimListWatch } from '../kube/slim-informer.js';
import type { Metrics } from '../metrics/metrics.js';
import { type HaproxyInstance, sameInstances, selectInstances, slimPod } from './haproxy-pods-select.js';

export type { HaproxyInstance } from './haproxy-pods-select.js';

export interface HaproxyPodsOptions {
  namespace: string;
  /** A label selector (`app.kubernetes.io/name=haproxy`): the API filters, the cache holds only these. */
  selector: string;
  /** Where each pod's Data Plane API listens. */
  port: number;
}

const RESOURCE = 'haproxy_pods';
const MIN_RESTART_MS = 500;
const MAX_RESTART_MS = 30_000;

/**
 * An informer on pods, each cut down by `slimPod` before the cache keeps it (listed or watched). Pods only:
 * ListWatch passes the selector to the watch, the list function to the list.
 */
function podInformer(kc: KubeConfig, options: HaproxyPodsOptions): ListWatch<V1Pod> {
  const core = kc.makeApiClient(CoreV1Api);
  return slimListWatch<V1Pod>(
    kc,
    `/api/v1/namespaces/${encodeURIComponent(options.namespace)}/pods`,
    () => core.listNamespacedPod({ namespace: options.namespace, labelSelector: options.selector }),
    slimPod,
    options.selector,
  );
}

/**
 * The HAProxy instances of a Kubernetes deployment: the Ready pods a label selector picks in one namespace,
 * each reached at `http://<podIP>:<port>`. Kept current by an informer (list, then watch; a 410 relists). A
 * broken watch keeps the last known instances and restarts with backoff: instances are never dropped
 * because the API went away. `onChange` gets the whole list, sorted by name, each time it differs from the
 * last one reported; the first successful list is always reported (an unread list is unknown, not empty).
 */
export class HaproxyPods {
  private readonly informer: ListWatch<V1Pod>;
  private current: HaproxyInstance[] = [];
  private listed = false;
  private up = false;
  private lastError: string | undefined;
  private errors = 0;
  private restartDelayMs = MIN_RESTART_MS;
  private stopped = false;
  private readonly timers = new Set<NodeJS.Timeout>();
  private readonly firstList: Promise<void>;
  private settleFirstList: { resolve: () => void; reject: (err: Error) => void } | undefined;

  constructor(
    kc: KubeConfig,
    private readonly options: HaproxyPodsOptions,
    private readonly onChange: (instances: readonly HaproxyInstance[]) => void,
    private readonly logger: Logger,
    private readonly metrics?: Pick<Metrics, 'kubernetesWatchUp' | 'kubernetesWatchErrors'>,
  ) {
    this.firstList = new Promise<void>((resolve, reject) => {
      this.settleFirstList = { resolve, reject };
    });
    // Without a listener a rejection at stop() would be unhandled when nobody awaits start().
    this.firstList.catch(() => {});
    this.informer = podInformer(kc, options);
    const seen = () => {
      // During the first list every pod arrives alone: the list is reported once, when complete.
      if (this.listed) this.publish();
    };
    this.informer.on('add', seen);
    this.informer.on('update', seen);
    this.informer.on('delete', seen);
    // 'connect' is not taken as "up": the informer says it before listing, also when the list then fails.
    this.informer.on('error', (err) => this.failed(err));
  }

  /**
   * Resolves once the pods have been listed (a failed list is tried again with backoff meanwhile, see
   * `health()`); rejects if `stop()` comes first. Bound the wait with a timeout where one matters.
   */
  start(): Promise<void> {
    void this.run();
    return this.firstList;
  }

  async stop(): Promise<void> {
    this.stopped = true;
    for (const t of this.timers) clearTimeout(t);
    this.timers.clear();
    this.settleFirstList?.reject(new Error('HAProxy pod discovery stopped before the first list'));
    this.settleFirstList = undefined;
    await this.informer.stop();
  }

  /** The current instances, sorted by name; empty until listed. */
  instances(): readonly HaproxyInstance[] {
    return this.current;
  }

  synced(): boolean {
    return this.listed;
  }

  /** For /readyz: whether the watch is connected, and its last error. */
  health(): Record<string, { ok: boolean; detail?: string }> {
    return {
      [`kubernetes_${RESOURCE}`]: {
        ok: this.up,
        ...(this.up ? {} : { detail: this.lastError ?? 'not connected yet' }),
      },
    };
  }

  private publish(force = false): void {
    const next = selectInstances(this.informer.list(this.options.namespace), this.options.port);
    if (!force && sameInstances(next, this.current)) return;
    this.current = next;
    this.logger.info(
      { instances: next.map((i) => i.name), namespace: this.options.namespace },
      'HAProxy instances changed',
    );
    this.onChange(next);
  }

  // Marks the watch down, keeps the last known instances, and tries again later with a growing delay.
  private failed(err: unknown): void {
    this.up = false;
    this.errors++;
    this.lastError = err instanceof Error ? err.message : String(err);
    this.metrics?.kubernetesWatchUp.set({ resource: RESOURCE }, 0);
    this.metrics?.kubernetesWatchErrors.inc({ resource: RESOURCE });
    if (this.stopped) return;
    this.logger.warn(
      { resource: RESOURCE, err: this.lastError, retryInMs: this.restartDelayMs },
      'kubernetes watch failed; keeping last known HAProxy instances',
    );
    const timer = setTimeout(() => {
      this.timers.delete(timer);
      void this.run();
    }, this.restartDelayMs);
    this.timers.add(timer);
    this.restartDelayMs = Math.min(this.restartDelayMs * 2, MAX_RESTART_MS);
  }

  private async run(): Promise<void> {
    if (this.stopped) return;
    const errorsBefore = this.errors;
    try {
      await this.informer.start();
    } catch (err) {
      // The list went through but opening the watch threw: same handling as a watch that broke.
      this.failed(err);
      return;
    }
    if (this.errors !== errorsBefore || this.stopped) return;
    // The list went through: the cache is the cluster's truth from here on.
    const first = !this.listed;
    this.listed = true;
    this.up = true;
    this.lastError = undefined;
    this.restartDelayMs = MIN_RESTART_MS;
    this.metrics?.kubernetesWatchUp.set({ resource: RESOURCE }, 1);
    // Later relists report through the informer's events, as watched changes do.
    if (first) this.publish(true);
    this.settleFirstList?.resolve();
    this.settleFirstList = undefined;
  }
}
