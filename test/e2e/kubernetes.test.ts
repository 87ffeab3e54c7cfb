import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import {
  CoreV1Api,
  KubernetesObjectApi,
  loadAllYaml,
  type V1Node,
  type V1Service,
} from '@kubernetes/client-node';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { chartRbac } from '../support/chart.js';
import { haproxyVersionUnderTest } from '../support/haproxy-testbed.js';
import { type KubeApiserver, startKubeApiserver } from '../support/kube-apiserver.js';
import type { ServiceProcess } from '../support/service-process.js';
import { startVersionServer, type VersionServer, waitForIdentity } from '../support/version-server.js';
import { type E2eHaproxy, startE2eHaproxy } from './fixture.js';

// The Kubernetes topology end to end: the service watches a real kube-apiserver (as the ServiceAccount of
// the chart's RBAC) and follows a vCluster Service's NodePort and its node's addresses. Nodes are
// loopback addresses (127.0.0.2-4) with a stand-in API server listening on each address and NodePort. Every
// case starts from no cluster, the Service on the first NodePort and the node at its first addresses, and
// registers the cluster itself.
const HOST = 'api.demo.example.com';

function node(internal: string, external: string): V1Node {
  return {
    metadata: { name: 'node-1' },
    status: {
      addresses: [
        { type: 'InternalIP', address: internal },
        { type: 'ExternalIP', address: external },
        { type: 'Hostname', address: 'node-1' },
      ],
      conditions: [{ type: 'Ready', status: 'True', reason: 'Test', lastHeartbeatTime: new Date() }],
    },
  };
}

function service(nodePort: number): V1Service {
  return {
    metadata: { name: 'demo', namespace: 'vcluster-demo' },
    spec: {
      type: 'NodePort',
      selector: { app: 'vcluster' },
      ports: [{ name: 'https', port: 443, targetPort: 8443, protocol: 'TCP', nodePort }],
    },
  };
}

/** Stand-in API servers on every address at one port of the NodePort range that is free on all of them. */
async function onNodePort(addresses: string[]): Promise<{ port: number; servers: VersionServer[] }> {
  for (let attempt = 0; attempt < 50; attempt++) {
    const port = 30000 + Math.floor(Math.random() * 2768);
    const servers: VersionServer[] = [];
    try {
      for (const address of addresses)
        servers.push(await startVersionServer(`${address}:${port}`, { address, port }));
      return { port, servers };
    } catch {
      await Promise.all(servers.map((s) => s.close()));
    }
  }
  throw new Error('no free NodePort on the loopback addresses');
}

describe(`end to end, Kubernetes topology, HAProxy ${haproxyVersionUnderTest()}`, () => {
  let kube: KubeApiserver;
  let admin: CoreV1Api;
  let e: E2eHaproxy;
  let svc: ServiceProcess;
  let np1: { port: number; servers: VersionServer[] };
  let np2: { port: number; servers: VersionServer[] };
  let kubeconfig: string;
  const url = () => `https://${HOST}:${e.sniPort}`;
  const start = (addressType: 'internal' | 'external') =>
    e.startService({
      KUBEBYON_TOPOLOGY: 'kubernetes',
      KUBECONFIG: kubeconfig,
      KUBEBYON_HAPROXY_NODE_ADDRESS_TYPE: addressType,
    });
  const setNode = async (body: V1Node) => {
    const current = await admin.readNodeStatus({ name: 'node-1' });
    await admin.replaceNodeStatus({ name: 'node-1', body: { ...current, status: body.status ?? {} } });
  };
  const setNodePort = async (nodePort: number) => {
    const current = await admin.readNamespacedService({ name: 'demo', namespace: 'vcluster-demo' });
    await admin.replaceNamespacedService({
      name: 'demo',
      namespace: 'vcluster-demo',
      body: {
        ...current,
        spec: { ...current.spec, ports: (current.spec?.ports ?? []).map((p) => ({ ...p, nodePort })) },
      },
    });
  };
  const register = () =>
    svc.client.request('PUT', '/v1/clusters/demo?wait=true', {
      control_plane_host: HOST,
      public_access_mode: 'loadbalancer',
      service: { namespace: 'vcluster-demo', name: 'demo', port: 443 },
    });
  /** Where a case that changes something starts: the cluster registered and routed to 127.0.0.2:`nodePort`. */
  const routedAt = async (nodePort: number) => {
    await setNodePort(nodePort);
    expect((await register()).status).toBe(200);
    const want = `127.0.0.2:${nodePort}`;
    expect(await waitForIdentity(url(), want)).toEqual({ identity: want, status: 200 });
  };

  beforeAll(async () => {
    // kube-apiserver first: it and HAProxy's fixture both pick free loopback ports, and two picking at once
    // can pick the same one.
    kube = await startKubeApiserver();
    [e, np1, np2] = await Promise.all([
      startE2eHaproxy(),
      onNodePort(['127.0.0.2']),
      onNodePort(['127.0.0.2', '127.0.0.3', '127.0.0.4']),
    ]);
    admin = kube.admin.makeApiClient(CoreV1Api);
    const objects = kube.admin.makeApiClient(KubernetesObjectApi);
    for (const manifest of loadAllYaml(`apiVersion: v1
kind: Namespace
metadata: {name: kubebyon-system}
---
apiVersion: v1
kind: Namespace
metadata: {name: vcluster-demo}
`))
      await objects.create(manifest);
    for (const manifest of chartRbac()) await objects.create(manifest);
    await admin.createNode({ body: { metadata: { name: 'node-1' } } });
    await setNode(node('127.0.0.2', '127.0.0.3'));
    await admin.createNamespacedService({ namespace: 'vcluster-demo', body: service(np1.port) });
    kubeconfig = join(e.stateDir, 'kubeconfig');
    writeFileSync(kubeconfig, kube.adapter.exportConfig());
    svc = await start('internal');
  }, 300_000);
  afterAll(async () => {
    await svc?.stop();
    await e?.stop();
    await kube?.stop();
    await Promise.all([...(np1?.servers ?? []), ...(np2?.servers ?? [])].map((s) => s.close()));
  });
  beforeEach(async () => {
    expect((await svc.client.request('PUT', '/v1/clusters?wait=true', { clusters: [] })).status).toBe(200);
    await setNodePort(np1.port);
    await setNode(node('127.0.0.2', '127.0.0.3'));
  });
  afterEach(async () => {
    expect(await e.operatorServes()).toBe(true);
    expect(e.operatorFileHash()).toBe(e.initialOperatorFileHash);
  });

  it('routes a cluster whose endpoints come from its Service and node', async () => {
    expect((await register()).status).toBe(200);
    expect((await svc.client.request('GET', '/v1/clusters/demo')).body).toMatchObject({
      state: 'applied',
      api_endpoint: url(),
    });
    expect(await waitForIdentity(url(), `127.0.0.2:${np1.port}`)).toEqual({
      identity: `127.0.0.2:${np1.port}`,
      status: 200,
    });
  });

  it('follows a changed NodePort without reloading HAProxy', async () => {
    await routedAt(np1.port);
    const loads = await e.loads();
    const started = Date.now();
    await setNodePort(np2.port);
    const want = `127.0.0.2:${np2.port}`;
    expect(await waitForIdentity(url(), want)).toEqual({ identity: want, status: 200 });
    console.log(
      `[measure] NodePort change: ${(await e.loads()) - loads} reloads, to routable ${Date.now() - started} ms`,
    );
    expect(await e.loads()).toBe(loads);
  });

  it('follows a node whose InternalIP changes without reloading HAProxy', async () => {
    await routedAt(np2.port);
    const loads = await e.loads();
    const started = Date.now();
    await setNode(node('127.0.0.4', '127.0.0.3'));
    const want = `127.0.0.4:${np2.port}`;
    expect(await waitForIdentity(url(), want)).toEqual({ identity: want, status: 200 });
    console.log(
      `[measure] InternalIP change: ${(await e.loads()) - loads} reloads, to routable ${Date.now() - started} ms`,
    );
    expect(await e.loads()).toBe(loads);
  });

  it('uses the ExternalIP with KUBEBYON_HAPROXY_NODE_ADDRESS_TYPE=external', async () => {
    await routedAt(np2.port);
    const loads = await e.loads();
    expect(await svc.stop()).toBe(0);
    try {
      svc = await start('external');
      const want = `127.0.0.3:${np2.port}`;
      expect(await waitForIdentity(url(), want)).toEqual({ identity: want, status: 200 });
      expect(await e.loads()).toBe(loads);
    } finally {
      // Back to the service every case starts with.
      await svc.stop();
      svc = await start('internal');
    }
  });
});
