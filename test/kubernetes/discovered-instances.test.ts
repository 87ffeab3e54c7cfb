import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CoreV1Api, KubernetesObjectApi, type V1Pod } from '@kubernetes/client-node';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config/env.js';
import { type Service, startService } from '../../src/service.js';
import { chartRbac } from '../support/chart.js';
import { type FakeDataplaneApi, startFakeDataplaneApi } from '../support/fake-dataplaneapi.js';
import { type KubeApiserver, startKubeApiserver } from '../support/kube-apiserver.js';
import { freeLoopbackPort } from '../support/ports.js';
import { waitFor } from '../support/wait.js';
import { signedClient } from '../support/webhook-client.js';

// The service finds its HAProxy instances as pods on a real kube-apiserver (as the adapter's ServiceAccount)
// and follows them: a lane per Ready pod, gone with the pod's readiness, made for a new pod with every route.
// Each pod's Data Plane API is a stand-in listening at the pod's (loopback) IP: what is proven here is the
// wiring from pods to instances; the real API's several instances are proven in test/dataplaneapi/.
const NS = 'kubebyon-system';
const SECRET = 'discovered-instances-secret';
const LABELS = { 'app.kubernetes.io/name': 'haproxy' };

describe('HAProxy instances discovered from pods, through the whole service', () => {
  let kube: KubeApiserver;
  let admin: CoreV1Api;
  let service: Service;
  let dir: string;
  let port: number;
  const apis: Record<string, FakeDataplaneApi> = {};

  const pod = async (name: string, ip: string, ready: boolean) => {
    const exists = await admin.readNamespacedPod({ name, namespace: NS }).catch(() => undefined);
    if (!exists)
      await admin.createNamespacedPod({
        namespace: NS,
        body: {
          metadata: { name, labels: LABELS },
          spec: { containers: [{ name: 'haproxy', image: 'haproxy' }] },
        },
      });
    const current = await admin.readNamespacedPodStatus({ name, namespace: NS });
    const body: V1Pod = {
      ...current,
      status: {
        phase: 'Running',
        podIP: ip,
        podIPs: [{ ip }],
        conditions: [{ type: 'Ready', status: ready ? 'True' : 'False', lastTransitionTime: new Date() }],
      },
    };
    await admin.replaceNamespacedPodStatus({ name, namespace: NS, body });
  };
  const client = () => signedClient(service.url, SECRET);
  const instancesOf = async (name: string) =>
    ((await client().request('GET', `/v1/clusters/${name}`)).body?.instances ?? []).map(
      (i: { name: string; state: string }) => `${i.name}:${i.state}`,
    );
  /** The hosts an instance routes: the keys of the SNI maps it runs. */
  const hosts = (api: FakeDataplaneApi) =>
    [...api.runtime.entries.values()].flatMap((entries) => [...entries.keys()]).sort();
  const scrape = async () => (await fetch(`${service.url}/metrics`)).text();

  beforeAll(async () => {
    kube = await startKubeApiserver();
    admin = kube.admin.makeApiClient(CoreV1Api);
    await admin.createNamespace({ body: { metadata: { name: NS } } });
    await admin.createNamespacedServiceAccount({ namespace: NS, body: { metadata: { name: 'default' } } });
    const objects = kube.admin.makeApiClient(KubernetesObjectApi);
    for (const manifest of chartRbac()) await objects.create(manifest);
    // One port free on every pod address: each pod's API listens on the same port, as in a Deployment.
    for (let attempt = 0; attempt < 20 && Object.keys(apis).length < 3; attempt++) {
      port = await freeLoopbackPort();
      for (const a of Object.values(apis)) await a.close();
      for (const key of Object.keys(apis)) delete apis[key];
      try {
        for (const [name, host] of [
          ['haproxy-a', '127.0.0.2'],
          ['haproxy-b', '127.0.0.3'],
          ['haproxy-c', '127.0.0.4'],
        ] as const)
          apis[name] = await startFakeDataplaneApi({ host, port });
      } catch {}
    }
    expect(Object.keys(apis)).toHaveLength(3);
    await pod('haproxy-a', '127.0.0.2', true);
    await pod('haproxy-b', '127.0.0.3', true);
    dir = mkdtempSync(join(tmpdir(), 'kubebyon-discovered-'));
    const kubeconfig = join(dir, 'kubeconfig');
    writeFileSync(kubeconfig, kube.adapter.exportConfig());
    const env = {
      KUBEBYON_LISTEN_ADDR: `127.0.0.1:${await freeLoopbackPort()}`,
      KUBEBYON_STATE_FILE: join(dir, 'clusters.json'),
      KUBEBYON_WEBHOOK_SECRET: SECRET,
      KUBEBYON_DATAPLANE_PASSWORD: (apis['haproxy-a'] as FakeDataplaneApi).password,
      KUBEBYON_STATIC_NODE_ADDRESSES: '10.0.0.1',
      KUBEBYON_HAPROXY_POD_SELECTOR: 'app.kubernetes.io/name=haproxy',
      KUBEBYON_KUBERNETES_NAMESPACE: NS,
      KUBEBYON_DATAPLANE_POD_PORT: String(port),
      KUBEBYON_RESYNC_INTERVAL_MS: '0',
      KUBECONFIG: kubeconfig,
    };
    service = await startService(loadConfig(env), { logger: pino({ level: 'silent' }), env });
  }, 300_000);
  afterAll(async () => {
    await service?.stop();
    await Promise.all(Object.values(apis).map((a) => a.close()));
    await kube?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('drives every Ready pod, follows readiness, and gives a new pod every route', async () => {
    const put = await client().request('PUT', '/v1/clusters/demo?wait=true', {
      control_plane_host: 'api.demo.example.com',
      public_access_mode: 'loadbalancer',
      node_port: 30443,
    });
    expect(put.status).toBe(200);
    expect(put.body.instances.map((i: { name: string }) => i.name)).toEqual(['haproxy-a', 'haproxy-b']);
    for (const name of ['haproxy-a', 'haproxy-b'])
      expect(hosts(apis[name] as FakeDataplaneApi)).toContain('api.demo.example.com');
    expect(hosts(apis['haproxy-c'] as FakeDataplaneApi)).not.toContain('api.demo.example.com');
    expect(await scrape()).toMatch(/^kubebyon_haproxy_adapter_haproxy_instances 2$/m);
    expect(await scrape()).toMatch(/reconciles_total\{result="changed",haproxy="haproxy-b"\} [1-9]/);

    // haproxy-b goes unready: no longer driven, its series gone; haproxy-c becomes ready: it gets the route.
    await pod('haproxy-b', '127.0.0.3', false);
    await pod('haproxy-c', '127.0.0.4', true);
    await waitFor(() => instancesOf('demo'), 15_000, 'the instances to follow the pods', {
      ok: (list: string[]) => list.join(',') === 'haproxy-a:applied,haproxy-c:applied',
    });
    expect(hosts(apis['haproxy-c'] as FakeDataplaneApi)).toContain('api.demo.example.com');
    expect(await scrape()).not.toMatch(/haproxy="haproxy-b"/);
    expect(await scrape()).toMatch(/^kubebyon_haproxy_adapter_haproxy_instances 2$/m);

    // A change now reaches the two driven instances only.
    const second = await client().request('PUT', '/v1/clusters/second?wait=true', {
      control_plane_host: 'api.second.example.com',
      public_access_mode: 'loadbalancer',
      node_port: 30444,
    });
    expect(second.status).toBe(200);
    expect(hosts(apis['haproxy-c'] as FakeDataplaneApi)).toContain('api.second.example.com');
    expect(hosts(apis['haproxy-b'] as FakeDataplaneApi)).not.toContain('api.second.example.com');
  }, 60_000);
});
