import { setTimeout as sleep } from 'node:timers/promises';
import { CoreV1Api, KubernetesObjectApi, type V1Pod } from '@kubernetes/client-node';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createMetrics } from '../../src/metrics/metrics.js';
import { type HaproxyInstance, HaproxyPods } from '../../src/topology/haproxy-pods.js';
import { chartRbac } from '../support/chart.js';
import { type KubeApiserver, startKubeApiserver } from '../support/kube-apiserver.js';
import { waitFor } from '../support/wait.js';

// HAProxy pods found by label on a real kube-apiserver, read as the adapter's ServiceAccount with only what
// the chart's RBAC grants. There is no kubelet: the test writes each pod's status itself.
const NS = 'kubebyon-system';
const SELECTOR = 'app.kubernetes.io/name=haproxy';
const FINALIZER = 'kubebyon.io/test-hold';

interface PodState {
  ip?: string;
  ready?: boolean;
  phase?: string;
}

describe('HAProxy pods discovered from a real kube-apiserver', () => {
  let kube: KubeApiserver;
  let admin: CoreV1Api;
  let pods: HaproxyPods | undefined;
  const reported: string[][] = [];
  const metrics = createMetrics();
  const logger = pino({ level: 'silent' });
  const names = (list: readonly HaproxyInstance[]) => list.map((i) => `${i.name}=${i.url}`);

  const createPod = async (name: string, labels: Record<string, string>, hold = false) => {
    await admin.createNamespacedPod({
      namespace: NS,
      body: {
        metadata: { name, labels, ...(hold ? { finalizers: [FINALIZER] } : {}) },
        spec: { containers: [{ name: 'haproxy', image: 'haproxy:3.0' }] },
      },
    });
  };
  const setStatus = async (name: string, { ip, ready = true, phase = 'Running' }: PodState) => {
    const current = await admin.readNamespacedPodStatus({ name, namespace: NS });
    const body: V1Pod = {
      ...current,
      status: {
        phase,
        ...(ip ? { podIP: ip, podIPs: [{ ip }] } : {}),
        conditions: [{ type: 'Ready', status: ready ? 'True' : 'False', lastTransitionTime: new Date() }],
      },
    };
    await admin.replaceNamespacedPodStatus({ name, namespace: NS, body });
  };
  const reportedBecomes = async (count: number, last: string[]) => {
    await waitFor(() => reported.length >= count, 15_000, `report #${count}: ${last.join(', ')}`, {
      everyMs: 50,
    });
    expect(reported.length).toBe(count);
    expect(reported.at(-1)).toEqual(last);
    expect(names(pods?.instances() ?? [])).toEqual(last);
  };

  beforeAll(async () => {
    kube = await startKubeApiserver();
    admin = kube.admin.makeApiClient(CoreV1Api);
    await admin.createNamespace({ body: { metadata: { name: NS } } });
    // Pods name a ServiceAccount; no controller-manager runs here to make the namespace's default one.
    await admin.createNamespacedServiceAccount({ namespace: NS, body: { metadata: { name: 'default' } } });
  }, 300_000);

  afterAll(async () => {
    await pods?.stop();
    await kube?.stop();
  });

  it('reads pods in its namespace only once the RBAC manifests are applied', async () => {
    const adapterApi = kube.adapter.makeApiClient(CoreV1Api);
    await expect(adapterApi.listNamespacedPod({ namespace: NS })).rejects.toMatchObject({ code: 403 });
    const objects = kube.admin.makeApiClient(KubernetesObjectApi);
    for (const manifest of chartRbac()) await objects.create(manifest);
    await waitFor(() => adapterApi.listNamespacedPod({ namespace: NS }), 10_000, 'the Role to take effect');
    await expect(adapterApi.listNamespacedPod({ namespace: 'default' })).rejects.toMatchObject({
      code: 403,
    });
  });

  it('lists Ready pods of the selector only, sorted, and reports the first list once', async () => {
    const haproxy = { 'app.kubernetes.io/name': 'haproxy' };
    await createPod('haproxy-b', haproxy);
    await setStatus('haproxy-b', { ip: '127.0.0.2' });
    await createPod('haproxy-a', haproxy, true);
    await setStatus('haproxy-a', { ip: '127.0.0.1' });
    await createPod('haproxy-c', haproxy);
    await setStatus('haproxy-c', { ip: '127.0.0.3', ready: false });
    await createPod('haproxy-pending', haproxy); // no status at all: not scheduled, no IP
    await createPod('haproxy-noip', haproxy);
    await setStatus('haproxy-noip', {});
    await createPod('haproxy-deleting', haproxy, true);
    await setStatus('haproxy-deleting', { ip: '127.0.0.5' });
    await admin.deleteNamespacedPod({ name: 'haproxy-deleting', namespace: NS });
    await createPod('other', { 'app.kubernetes.io/name': 'other' });
    await setStatus('other', { ip: '127.0.0.9' });

    pods = new HaproxyPods(
      kube.adapter,
      { namespace: NS, selector: SELECTOR, port: 5555 },
      (list) => reported.push(names(list)),
      logger,
      metrics,
    );
    await pods.start();
    expect(pods.synced()).toBe(true);
    expect(pods.health()).toEqual({ kubernetes_haproxy_pods: { ok: true } });
    expect(reported).toEqual([['haproxy-a=http://127.0.0.1:5555', 'haproxy-b=http://127.0.0.2:5555']]);
    expect(await metrics.registry.metrics()).toMatch(
      /kubebyon_haproxy_adapter_kubernetes_watch_up\{resource="haproxy_pods"\} 1/,
    );
  });

  it('adds a pod that becomes Ready, and reports nothing for a change that selects the same', async () => {
    // An unrelated change first (a label the selector does not read, then a status the same as before):
    // had either been reported, it would show as an extra report ahead of the one awaited.
    await admin.patchNamespacedPod({
      name: 'haproxy-b',
      namespace: NS,
      body: [{ op: 'add', path: '/metadata/labels/extra', value: 'x' }],
    });
    await setStatus('haproxy-b', { ip: '127.0.0.2' });
    await setStatus('haproxy-c', { ip: '127.0.0.3' });
    await reportedBecomes(2, [
      'haproxy-a=http://127.0.0.1:5555',
      'haproxy-b=http://127.0.0.2:5555',
      'haproxy-c=http://127.0.0.3:5555',
    ]);
    await sleep(500);
    expect(reported).toHaveLength(2);
  });

  it('drops a pod that goes unready, one being deleted, and one that loses the label', async () => {
    await setStatus('haproxy-b', { ip: '127.0.0.2', ready: false });
    await reportedBecomes(3, ['haproxy-a=http://127.0.0.1:5555', 'haproxy-c=http://127.0.0.3:5555']);
    // The finalizer holds the pod with its deletion mark while it still says Ready.
    await admin.deleteNamespacedPod({ name: 'haproxy-a', namespace: NS });
    await reportedBecomes(4, ['haproxy-c=http://127.0.0.3:5555']);
    await admin.patchNamespacedPod({
      name: 'haproxy-c',
      namespace: NS,
      body: [{ op: 'replace', path: '/metadata/labels/app.kubernetes.io~1name', value: 'other' }],
    });
    await reportedBecomes(5, []);
  });

  it('follows a pod that moves, in IPv6 too', async () => {
    await setStatus('haproxy-b', { ip: '127.0.0.22' });
    await reportedBecomes(6, ['haproxy-b=http://127.0.0.22:5555']);
    await createPod('haproxy-v6', { 'app.kubernetes.io/name': 'haproxy' });
    await setStatus('haproxy-v6', { ip: 'fd00::6' });
    await reportedBecomes(7, ['haproxy-b=http://127.0.0.22:5555', 'haproxy-v6=http://[fd00::6]:5555']);
  });

  it('keeps the last known instances while the API is down, and follows changes once it is back', async () => {
    await kube.down();
    try {
      await waitFor(() => pods?.health().kubernetes_haproxy_pods?.ok === false, 30_000, 'the watch down');
      expect(names(pods?.instances() ?? [])).toHaveLength(2);
      expect(reported).toHaveLength(7);
    } finally {
      // The next tests need the API, whatever happened here.
      await kube.up();
    }
    await admin.deleteNamespacedPod({ name: 'haproxy-v6', namespace: NS });
    await reportedBecomes(8, ['haproxy-b=http://127.0.0.22:5555']);
    await waitFor(() => pods?.health().kubernetes_haproxy_pods?.ok, 60_000, 'the watch back', {
      everyMs: 200,
    });
  }, 150_000);

  it('retries a refused list, says why, and rejects a start that stop() overtakes', async () => {
    // The Role grants pods in kubebyon-system only: elsewhere every list is refused.
    const refused = new HaproxyPods(
      kube.adapter,
      { namespace: 'default', selector: SELECTOR, port: 5555 },
      () => {},
      logger,
    );
    const started = refused.start();
    await waitFor(
      () => refused.health().kubernetes_haproxy_pods?.detail?.includes('403'),
      10_000,
      'the refusal in health()',
    );
    expect(refused.synced()).toBe(false);
    await refused.stop();
    await expect(started).rejects.toThrow(/stopped before the first list/);
  });
});
