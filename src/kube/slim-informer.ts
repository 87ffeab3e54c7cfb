import { type KubeConfig, type KubernetesObject, ListWatch, Watch } from '@kubernetes/client-node';

/**
 * client-node's `ListWatch`, with each object cut down by `slim` before the cache keeps it, listed or watched
 * (controller-runtime's cache transform: no `managedFields`, nothing the reader does not use). One for the
 * topology's nodes and Services, the HAProxy pods and the ClusterRoutes.
 */
export function slimListWatch<T extends KubernetesObject>(
  kc: KubeConfig,
  path: string,
  list: () => Promise<{ items?: unknown[]; metadata?: { resourceVersion?: string } }>,
  slim: (o: T) => T,
  labelSelector?: string,
): ListWatch<T> {
  const watch = new Watch(kc);
  const slimWatch = {
    watch: (
      p: string,
      query: Record<string, string | number | boolean | undefined>,
      callback: (phase: string, obj: unknown, watchObj?: unknown) => void,
      done: (err: unknown) => void,
    ) =>
      watch.watch(
        p,
        query,
        // ERROR and BOOKMARK objects are no T: passed on as they are (the list-watch reads their metadata).
        (phase, obj, watchObj) =>
          callback(
            phase,
            phase === 'ADDED' || phase === 'MODIFIED' || phase === 'DELETED' ? slim(obj as T) : obj,
            watchObj,
          ),
        done,
      ),
  } as unknown as Watch;
  const listSlim = async () => {
    const result = await list();
    return { ...result, items: ((result.items ?? []) as T[]).map(slim) };
  };
  return new ListWatch<T>(path, slimWatch, listSlim as never, false, labelSelector);
}
