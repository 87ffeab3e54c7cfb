import { setTimeout as sleep } from 'node:timers/promises';
import { CoreV1Api, KubernetesObjectApi, type V1Node, type V1Service } from '@kubernetes/client-node';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createMetrics } from '../../src/metrics/metrics.js';
import type { ClusterTarget } from '../../src/model/cluster.js';
import type { Endpoint } from '../../src/routes/endpoint.js';
import { KubernetesTopology } from '../../src/topology/kubernetes.js';
import type { TopologyAnswer } from '../../src/topology/topology.js';
import { chartRbac } from '../support/chart.js';
import { type KubeApiserver, startKubeApiserver } from '../support/kube-apiserver.js';
import { waitFor } from '../support/wait.js';

// The topology against a real kube-apiserver (RBAC on), authenticated as the ServiceAccount that
// the chart's RBAC binds: proves both the informer logic and that the manifests suffice.
const demo: ClusterTarget = { service: { namespace: 'vcluster-demo', name: 'demo', port: 443 } };

function nodeBody(name: string, internal: string, external?: string, ready = 'True'): V1Node {
  return {
    metadata: { name },
    status: {
      addresses: [
        { type: 'InternalIP', address: internal },
        ...(external ? [{ type: 'ExternalIP', address: external }] : []),
        { type: 'Hostname', address: name },
      ],
      conditions: [{ type: 'Ready', status: ready, reason: 'Test', lastHeartbeatTime: new Date() }],
    },
  };
}

function serviceBody(nodePort: number, type = 'NodePort'): V1Service {
  return {
    metadata: { name: 'demo', namespace: 'vcluster-demo' },
    spec: {
      type,
      selector: { app: 'vcluster' },
      ports: [
        {
          name: 'https',
          port: 443,
          targetPort: 8443,
          protocol: 'TCP',
          ...(type === 'NodePort' ? { nodePort } : {}),
        },
      ],
    },
  };
}

describe('Kubernetes topology against a real kube-apiserver', () => {
  let kube: KubeApiserver;
  let admin: CoreV1Api;
  let internal: KubernetesTopology;
  let external: KubernetesTopology;
  let changes = 0;
  const metrics = createMetrics();
  const logger = pino({ level: 'silent' });

  const endpointsBecome = async (
    topology: KubernetesTopology,
    target: ClusterTarget,
    want: TopologyAnswer,
  ) => {
    const got = await waitFor(() => topology.endpointsFor(target), 15_000, JSON.stringify(want), {
      ok: (answer) => JSON.stringify(answer) === JSON.stringify(want),
      everyMs: 50,
    });
    expect(got).toEqual(want);
  };
  const at = (port: number, ...addresses: string[]): TopologyAnswer => ({
    endpoints: addresses.map((address): Endpoint => ({ address, port })),
  });
  const setNodeStatus = async (name: string, body: V1Node) => {
    const current = await admin.readNodeStatus({ name });
    await admin.replaceNodeStatus({ name, body: { ...current, status: body.status ?? {} } });
  };

  beforeAll(async () => {
    kube = await startKubeApiserver();
    admin = kube.admin.makeApiClient(CoreV1Api);
    await admin.createNamespace({ body: { metadata: { name: 'kubebyon-system' } } });
    await admin.createNamespace({ body: { metadata: { name: 'vcluster-demo' } } });
  }, 300_000);

  afterAll(async () => {
    await internal?.stop();
    await external?.stop();
    await kube?.stop();
  });

  it('is refused before the RBAC manifests are applied, and reads nodes and services after', async () => {
    const adapterApi = kube.adapter.makeApiClient(CoreV1Api);
    await expect(adapterApi.listNode()).rejects.toMatchObject({ code: 403 });
    const objects = kube.admin.makeApiClient(KubernetesObjectApi);
    for (const manifest of chartRbac()) await objects.create(manifest);
    await waitFor(() => adapterApi.listNode(), 10_000, 'the granted RBAC to take effect');
    await expect(adapterApi.listServiceForAllNamespaces()).resolves.toBeDefined();
    await expect(adapterApi.listNamespace()).rejects.toMatchObject({ code: 403 });

    internal = new KubernetesTopology(
      kube.adapter,
      { addressType: 'internal', excludeNotReady: true },
      () => changes++,
      metrics,
      logger,
    );
    external = new KubernetesTopology(
      kube.adapter,
      { addressType: 'external', excludeNotReady: true },
      () => {},
      metrics,
      logger,
    );
    await internal.start();
    await external.start();
    expect(internal.synced()).toBe(true);
    expect(internal.health()).toEqual({ kubernetes_nodes: { ok: true }, kubernetes_services: { ok: true } });
  });

  it('reports a missing Service, then follows it when it appears', async () => {
    expect(internal.endpointsFor(demo)).toEqual({ endpoints: [], problem: 'service_not_found' });
    await admin.createNamespacedService({ namespace: 'vcluster-demo', body: serviceBody(31443) });
    await endpointsBecome(internal, demo, { endpoints: [], problem: 'no_nodes' });
  });

  it('adds a new node as an endpoint, and picks internal or external addresses', async () => {
    await admin.createNode({ body: nodeBody('node-a', '10.0.0.1', '203.0.113.1') });
    await endpointsBecome(internal, demo, at(31443, '10.0.0.1'));
    await endpointsBecome(external, demo, at(31443, '203.0.113.1'));
    await admin.createNode({ body: nodeBody('node-b', '10.0.0.2') });
    await endpointsBecome(internal, demo, at(31443, '10.0.0.1', '10.0.0.2'));
    // node-b has no ExternalIP: the external topology falls back to its InternalIP.
    await endpointsBecome(external, demo, at(31443, '10.0.0.2', '203.0.113.1'));
  });

  it('moves an endpoint when a node address changes', async () => {
    await setNodeStatus('node-b', nodeBody('node-b', '10.0.0.22'));
    await endpointsBecome(internal, demo, at(31443, '10.0.0.1', '10.0.0.22'));
  });

  it('drops a NotReady node and takes it back when Ready', async () => {
    await setNodeStatus('node-b', nodeBody('node-b', '10.0.0.22', undefined, 'False'));
    await endpointsBecome(internal, demo, at(31443, '10.0.0.1'));
    await setNodeStatus('node-b', nodeBody('node-b', '10.0.0.22'));
    await endpointsBecome(internal, demo, at(31443, '10.0.0.1', '10.0.0.22'));
  });

  it('does not ask for a pass on a heartbeat that changes nothing routing depends on', async () => {
    const before = changes;
    await setNodeStatus('node-a', nodeBody('node-a', '10.0.0.1', '203.0.113.1'));
    await sleep(1000);
    expect(changes).toBe(before);
  });

  it('follows a changed NodePort and reports a Service that is no longer NodePort', async () => {
    const svc = await admin.readNamespacedService({ name: 'demo', namespace: 'vcluster-demo' });
    const ports = (svc.spec?.ports ?? []).map((p) => ({ ...p, nodePort: 31444 }));
    await admin.replaceNamespacedService({
      name: 'demo',
      namespace: 'vcluster-demo',
      body: { ...svc, spec: { ...svc.spec, ports } },
    });
    await endpointsBecome(internal, demo, at(31444, '10.0.0.1', '10.0.0.22'));
    const byName: ClusterTarget = { service: { namespace: 'vcluster-demo', name: 'demo', port: 'https' } };
    await endpointsBecome(internal, byName, at(31444, '10.0.0.1', '10.0.0.22'));
    await endpointsBecome(
      internal,
      { service: { namespace: 'vcluster-demo', name: 'demo', port: 8443 } },
      { endpoints: [], problem: 'service_port_not_found' },
    );
    await admin.deleteNamespacedService({ name: 'demo', namespace: 'vcluster-demo' });
    await admin.createNamespacedService({ namespace: 'vcluster-demo', body: serviceBody(0, 'ClusterIP') });
    await endpointsBecome(internal, demo, { endpoints: [], problem: 'service_not_nodeport' });
    await admin.deleteNamespacedService({ name: 'demo', namespace: 'vcluster-demo' });
    await admin.createNamespacedService({ namespace: 'vcluster-demo', body: serviceBody(31445) });
    await endpointsBecome(internal, demo, at(31445, '10.0.0.1', '10.0.0.22'));
  });

  it('drops a deleted node', async () => {
    await admin.deleteNode({ name: 'node-b' });
    await endpointsBecome(internal, demo, at(31445, '10.0.0.1'));
  });

  it('keeps the last known endpoints while the API is down, reports it, and recovers by itself', async () => {
    await kube.down();
    await waitFor(
      () => internal.health().kubernetes_nodes?.ok === false,
      30_000,
      'the nodes watch reported down',
    );
    expect(internal.health().kubernetes_nodes?.ok).toBe(false);
    expect(internal.endpointsFor(demo)).toEqual(at(31445, '10.0.0.1'));
    const text = await metrics.registry.metrics();
    expect(text).toMatch(/kubebyon_haproxy_adapter_kubernetes_watch_up\{resource="nodes"\} 0/);
    await kube.up();
    await admin.createNode({ body: nodeBody('node-c', '10.0.0.3') });
    await endpointsBecome(internal, demo, at(31445, '10.0.0.1', '10.0.0.3'));
    // Each watch reconnects on its own backoff: the services watch may come back after the nodes one.
    await waitFor(
      () => internal.health().kubernetes_services?.ok === true,
      60_000,
      'the services watch back',
      {
        everyMs: 200,
      },
    );
    expect(internal.health()).toEqual({ kubernetes_nodes: { ok: true }, kubernetes_services: { ok: true } });
  }, 150_000);
});
