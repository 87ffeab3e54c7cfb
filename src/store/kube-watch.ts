import { setTimeout as sleep } from 'node:timers/promises';
import type { CustomObjectsApi, KubeConfig, KubernetesObject, ListWatch } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import { slimListWatch } from '../kube/slim-informer.js';
import type { RawRoute } from './kube-route.js';

export interface RouteBase {
  group: string;
  version: string;
  namespace: string;
  plural: string;
}

const MIN_RESTART_MS = 500;
const MAX_RESTART_MS = 30_000;

/**
 * The ClusterRoutes of one namespace, listed then watched (a 410 lists anew), each object cut down to what
 * the store reads before the informer keeps it (as controller-runtime strips managedFields). A broken watch
 * keeps what is known and starts again with a growing delay, as `KubernetesTopology` does.
 */
export class RouteWatch {
  private readonly informer: ListWatch<KubernetesObject>;
  private up = false;
  private synced = false;
  private lastError: string | undefined;
  private restartDelayMs = MIN_RESTART_MS;
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;
  private firstSync: () => void = () => {};

  constructor(
    kc: KubeConfig,
    api: CustomObjectsApi,
    base: RouteBase,
    on: { seen: (o: RawRoute) => void; deleted: (o: RawRoute) => void },
    private readonly logger: Logger,
  ) {
    this.informer = slimInformer(kc, api, base);
    this.informer.on('add', on.seen);
    this.informer.on('update', on.seen);
    this.informer.on('delete', on.deleted);
    this.informer.on('error', (err) => this.failed(err));
  }

  /** Starts the watch; resolves once the first list went through, rejects after `timeoutMs` (then stopped). */
  async start(timeoutMs: number): Promise<void> {
    const synced = new Promise<void>((resolve) => {
      this.firstSync = resolve;
    });
    void this.run();
    const timeout = sleep(timeoutMs, 'timeout', { ref: false });
    if ((await Promise.race([synced, timeout])) === 'timeout') {
      await this.stop();
      throw new Error(`ClusterRoutes not listed within ${timeoutMs} ms: ${this.lastError ?? 'no answer'}`);
    }
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    await this.informer.stop();
  }

  health(): { ok: boolean; detail?: string } {
    if (this.up && this.synced) return { ok: true };
    return { ok: false, detail: `ClusterRoute watch down: ${this.lastError ?? 'not connected yet'}` };
  }

  private async run(): Promise<void> {
    const errorBefore = this.lastError;
    this.lastError = undefined;
    try {
      await this.informer.start();
    } catch (err) {
      this.failed(err);
      return;
    }
    // 'connect' is not taken as "up": the informer says it before listing, also when the list then fails.
    if (this.lastError !== undefined || this.stopped) return;
    this.up = true;
    this.synced = true;
    this.restartDelayMs = MIN_RESTART_MS;
    if (errorBefore !== undefined) this.logger.info('ClusterRoute watch is back');
    this.firstSync();
  }

  private failed(err: unknown): void {
    this.up = false;
    this.lastError = describeError(err);
    if (this.stopped) return;
    this.logger.warn(
      { err: this.lastError, retryInMs: this.restartDelayMs },
      'ClusterRoute watch failed; keeping the last known clusters',
    );
    clearTimeout(this.timer);
    this.timer = setTimeout(() => void this.run(), this.restartDelayMs);
    this.restartDelayMs = Math.min(this.restartDelayMs * 2, MAX_RESTART_MS);
  }
}

/** An API error in one line: the client's message holds the whole response, headers included. */
export function describeError(err: unknown): string {
  const e = err as { code?: unknown; statusCode?: unknown; body?: unknown; message?: unknown };
  const status = e?.code ?? e?.statusCode;
  if (typeof status === 'number') {
    let message = '';
    try {
      const body = typeof e.body === 'string' ? JSON.parse(e.body) : e.body;
      message = String((body as { message?: unknown })?.message ?? '');
    } catch {}
    return `HTTP ${status}${message ? `: ${message}` : ''}`;
  }
  return err instanceof Error ? err.message : String(err);
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
