import { setTimeout as sleep } from 'node:timers/promises';
import type { CustomObjectsApi, KubeConfig, KubernetesObject, ListWatch } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import { RestartingWatch } from '../kube/restarting-watch.js';
import { slimListWatch } from '../kube/slim-informer.js';
import type { RawRoute } from './kube-route.js';

export interface RouteBase {
  group: string;
  version: string;
  namespace: string;
  plural: string;
}

/**
 * The ClusterRoutes of one namespace, listed then watched (a 410 lists anew), each object cut down to what
 * the store reads before the informer keeps it (as controller-runtime strips managedFields). A broken watch
 * keeps what is known and starts again with a growing delay (`RestartingWatch`).
 */
export class RouteWatch {
  private readonly informer: ListWatch<KubernetesObject>;
  private readonly watch: RestartingWatch;
  private firstSync: () => void = () => {};

  constructor(
    kc: KubeConfig,
    api: CustomObjectsApi,
    base: RouteBase,
    on: { seen: (o: RawRoute) => void; deleted: (o: RawRoute) => void },
    logger: Logger,
  ) {
    this.informer = slimInformer(kc, api, base);
    this.informer.on('add', on.seen);
    this.informer.on('update', on.seen);
    this.informer.on('delete', on.deleted);
    this.watch = new RestartingWatch(this.informer, {
      resource: 'clusterroutes',
      logger,
      keeps: 'the last known clusters',
      synced: () => this.firstSync(),
    });
  }

  /** Starts the watch; resolves once the first list went through, rejects after `timeoutMs` (then stopped). */
  async start(timeoutMs: number): Promise<void> {
    const synced = new Promise<void>((resolve) => {
      this.firstSync = resolve;
    });
    void this.watch.start();
    // A timer that keeps the process alive while it waits: the watch's retries run on the clock's timers,
    // which do not, and nothing else does yet at start (a first list that failed, e.g. 429 while the API's
    // storage initializes, left the event loop empty: Node exited with 13, a top-level await unsettled).
    const waiting = new AbortController();
    const timeout = sleep(timeoutMs, 'timeout', { signal: waiting.signal }).catch(() => 'synced');
    try {
      if ((await Promise.race([synced, timeout])) === 'timeout') {
        await this.stop();
        throw new Error(
          `ClusterRoutes not listed within ${timeoutMs} ms: ${this.watch.lastError ?? 'no answer'}`,
        );
      }
    } finally {
      waiting.abort();
    }
  }

  stop(): Promise<void> {
    return this.watch.stop();
  }

  health(): { ok: boolean; detail?: string } {
    const h = this.watch.health();
    return h.ok ? h : { ok: false, detail: `ClusterRoute watch down: ${h.detail}` };
  }
}

function slim(o: RawRoute & { apiVersion?: string; kind?: string }): KubernetesObject {
  const { name, namespace, resourceVersion } = o.metadata ?? {};
  return {
    ...(o.apiVersion === undefined ? {} : { apiVersion: o.apiVersion }),
    ...(o.kind === undefined ? {} : { kind: o.kind }),
    metadata: {
      ...(name === undefined ? {} : { name }),
      ...(namespace === undefined ? {} : { namespace }),
      ...(resourceVersion === undefined ? {} : { resourceVersion }),
    },
    ...({ spec: o.spec, status: o.status } as object),
  };
}

function slimInformer(kc: KubeConfig, api: CustomObjectsApi, base: RouteBase): ListWatch<KubernetesObject> {
  const path = `/apis/${base.group}/${base.version}/namespaces/${base.namespace}/${base.plural}`;
  return slimListWatch<KubernetesObject>(kc, path, () => api.listNamespacedCustomObject(base), slim);
}
