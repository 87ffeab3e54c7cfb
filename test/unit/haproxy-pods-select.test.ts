import type { V1Pod } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import {
  dataplaneUrl,
  podInstance,
  sameInstances,
  selectInstances,
  slimPod,
} from '../../src/topology/haproxy-pods-select.js';

function pod(
  name: string,
  ip: string | undefined,
  over: { phase?: string; ready?: string; deleting?: boolean } = {},
): V1Pod {
  return {
    metadata: {
      name,
      namespace: 'ns',
      resourceVersion: '7',
      labels: { 'app.kubernetes.io/name': 'haproxy' },
      managedFields: [{ manager: 'kubelet', operation: 'Update' }],
      ...(over.deleting ? { deletionTimestamp: new Date(0) } : {}),
    },
    spec: { containers: [{ name: 'haproxy', image: 'haproxy:3.0' }] },
    status: {
      phase: over.phase ?? 'Running',
      ...(ip ? { podIP: ip, podIPs: [{ ip }] } : {}),
      conditions: [
        { type: 'PodScheduled', status: 'True' },
        { type: 'Ready', status: over.ready ?? 'True', lastTransitionTime: new Date(0) },
      ],
      containerStatuses: [
        { name: 'haproxy', image: 'haproxy:3.0', imageID: 'x', ready: true, restartCount: 0 },
      ],
    },
  };
}

describe('HAProxy pod selection', () => {
  it('keeps only what selection reads, and selects the same from the slim pod', () => {
    const fat = pod('haproxy-0', '10.1.0.5', { deleting: true });
    expect(slimPod(fat)).toEqual({
      metadata: { name: 'haproxy-0', namespace: 'ns', resourceVersion: '7', deletionTimestamp: new Date(0) },
      status: { phase: 'Running', podIP: '10.1.0.5', conditions: [{ type: 'Ready', status: 'True' }] },
    });
    const ready = pod('haproxy-1', '10.1.0.6');
    expect(podInstance(slimPod(ready), 5555)).toEqual(podInstance(ready, 5555));
    expect(slimPod({})).toEqual({ metadata: {}, status: {} });
  });

  it('takes running, Ready pods with an IP and no deletion mark', () => {
    expect(podInstance(pod('a', '10.1.0.1'), 5555)).toEqual({ name: 'a', url: 'http://10.1.0.1:5555' });
    expect(podInstance(pod('a', '10.1.0.1', { ready: 'False' }), 5555)).toBeUndefined();
    expect(podInstance(pod('a', '10.1.0.1', { phase: 'Pending' }), 5555)).toBeUndefined();
    expect(podInstance(pod('a', '10.1.0.1', { deleting: true }), 5555)).toBeUndefined();
    expect(podInstance(pod('a', undefined), 5555)).toBeUndefined();
    expect(podInstance(pod('a', 'not-an-ip'), 5555)).toBeUndefined();
    expect(podInstance({ status: { phase: 'Running' } }, 5555)).toBeUndefined();
  });

  it('writes IPv6 addresses in brackets', () => {
    expect(dataplaneUrl('fd00::1', 5555)).toBe('http://[fd00::1]:5555');
    expect(dataplaneUrl('127.0.0.1', 80)).toBe('http://127.0.0.1:80');
    expect(podInstance(pod('v6', 'fd00::2'), 5556)?.url).toBe('http://[fd00::2]:5556');
  });

  it('sorts by name whatever the list order, and compares lists by name and url', () => {
    const pods = [
      pod('c', '10.1.0.3'),
      pod('a', '10.1.0.1'),
      pod('x', '10.1.0.9', { ready: 'False' }),
      pod('b', '10.1.0.2'),
    ];
    const got = selectInstances(pods, 5555);
    expect(got.map((i) => i.name)).toEqual(['a', 'b', 'c']);
    expect(selectInstances([...pods].reverse(), 5555)).toEqual(got);
    expect(sameInstances(got, selectInstances(pods, 5555))).toBe(true);
    expect(sameInstances(got, got.slice(1))).toBe(false);
    expect(sameInstances(got, selectInstances(pods, 5556))).toBe(false);
    expect(sameInstances([], [])).toBe(true);
  });
});
