import { CoreV1Api, type KubeConfig, type ListWatch, type V1Pod } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import { RestartingWatch } from '../kube/restarting-watch.js';
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
  private readonly watch: RestartingWatch;
  private current: HaproxyInstance[] = [];
  private readonly firstList: Promise<void>;
  private settleFirstList: { resolve: () => void; reject: (err: Error) => void } | undefined;

  constructor(
    kc: KubeConfig,
    private readonly options: HaproxyPodsOptions,
    private readonly onChange: (instances: readonly HaproxyInstance[]) => void,
    private readonly logger: Logger,
    metrics?: Pick<Metrics, 'kubernetesWatchUp' | 'kubernetesWatchErrors'>,
  ) {
    this.firstList = new Promise<void>((resolve, reject) => {
      this.settleFirstList = { resolve, reject };
    });
    // Without a listener a rejection at stop() would be unhandled when nobody awaits start().
    this.firstList.catch(() => {});
    this.informer = podInformer(kc, options);
    const seen = () => {
      // During the first list every pod arrives alone: the list is reported once, when complete.
      if (this.watch.synced) this.publish();
    };
    this.informer.on('add', seen);
    this.informer.on('update', seen);
    this.informer.on('delete', seen);
    this.watch = new RestartingWatch(this.informer, {
      resource: RESOURCE,
      logger,
      metrics,
      keeps: 'the last known HAProxy instances',
      // Later relists report through the informer's events, as watched changes do.
      synced: (first) => {
        if (first) this.publish(true);
        this.settleFirstList?.resolve();
        this.settleFirstList = undefined;
      },
    });
  }

  /**
   * Resolves once the pods have been listed (a failed list is tried again with backoff meanwhile, see
   * `health()`); rejects if `stop()` comes first. Bound the wait with a timeout where one matters.
   */
  start(): Promise<void> {
    void this.watch.start();
    return this.firstList;
  }

  async stop(): Promise<void> {
    this.settleFirstList?.reject(new Error('HAProxy pod discovery stopped before the first list'));
    this.settleFirstList = undefined;
    await this.watch.stop();
  }

  /** The current instances, sorted by name; empty until listed. */
  instances(): readonly HaproxyInstance[] {
    return this.current;
  }

  synced(): boolean {
    return this.watch.synced;
  }

  /** For /readyz: whether the watch is connected, and its last error. */
  health(): Record<string, { ok: boolean; detail?: string }> {
    return { [`kubernetes_${RESOURCE}`]: this.watch.health() };
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
}
