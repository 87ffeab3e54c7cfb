import { isIP } from 'node:net';
import type { V1Pod } from '@kubernetes/client-node';

/**
 * One HAProxy the service drives, found as a pod: its name, and its Data Plane API. The name is the pod's,
 * and becomes a metric label (`haproxy=<name>`): bounded by the pods the selector selects.
 */
export interface HaproxyInstance {
  name: string;
  url: string;
}

/**
 * What of a pod the discovery keeps: name, namespace and version (the informer's cache keys and compares
 * them), deletion mark, phase, IP and Ready condition. The rest (spec, managedFields, container statuses)
 * is dropped as it arrives.
 */
export function slimPod(pod: V1Pod): V1Pod {
  const m = pod.metadata ?? {};
  const s = pod.status ?? {};
  const ready = s.conditions?.find((c) => c.type === 'Ready');
  return {
    metadata: {
      ...(m.name !== undefined ? { name: m.name } : {}),
      ...(m.namespace !== undefined ? { namespace: m.namespace } : {}),
      ...(m.resourceVersion !== undefined ? { resourceVersion: m.resourceVersion } : {}),
      ...(m.deletionTimestamp !== undefined ? { deletionTimestamp: m.deletionTimestamp } : {}),
    },
    status: {
      ...(s.phase !== undefined ? { phase: s.phase } : {}),
      ...(s.podIP !== undefined ? { podIP: s.podIP } : {}),
      ...(ready ? { conditions: [{ type: ready.type, status: ready.status }] } : {}),
    },
  };
}

/** `http://<ip>:<port>`, an IPv6 address in brackets; undefined for anything that is not an IP. */
export function dataplaneUrl(ip: string, port: number): string | undefined {
  const family = isIP(ip);
  if (family === 0) return undefined;
  return family === 6 ? `http://[${ip}]:${port}` : `http://${ip}:${port}`;
}

/**
 * A pod HAProxy traffic may go to, and so the service writes to: running, Ready, with an IP, and not on its
 * way out (a terminating pod may still say Ready until its kubelet notices).
 */
export function podInstance(pod: V1Pod, port: number): HaproxyInstance | undefined {
  const name = pod.metadata?.name;
  if (!name || pod.metadata?.deletionTimestamp) return undefined;
  if (pod.status?.phase !== 'Running') return undefined;
  if (!pod.status.conditions?.some((c) => c.type === 'Ready' && c.status === 'True')) return undefined;
  const url = pod.status.podIP ? dataplaneUrl(pod.status.podIP, port) : undefined;
  return url ? { name, url } : undefined;
}

/** The instances among `pods`, sorted by name so that the result never depends on list order. */
export function selectInstances(pods: readonly V1Pod[], port: number): HaproxyInstance[] {
  const out: HaproxyInstance[] = [];
  for (const pod of pods) {
    const instance = podInstance(pod, port);
    if (instance) out.push(instance);
  }
  return out.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
}

export function sameInstances(a: readonly HaproxyInstance[], b: readonly HaproxyInstance[]): boolean {
  return a.length === b.length && a.every((x, i) => x.name === b[i]?.name && x.url === b[i]?.url);
}
