import { createServer, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { KubeConfig, type V1Node, type V1Service } from '@kubernetes/client-node';
import pino from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { createMetrics } from '../../src/metrics/metrics.js';
import {
  selectNodeAddresses,
  serviceNodePort,
  slimNode,
  slimService,
} from '../../src/topology/kube-select.js';
import { KubernetesTopology } from '../../src/topology/kubernetes.js';
import { waitFor } from '../support/wait.js';

const managed = [{ manager: 'kubelet', operation: 'Update', fieldsV1: { 'f:status': { 'f:images': {} } } }];

function fatNode(name: string, address: string, rv: string, ready = 'True'): V1Node {
  return {
    metadata: { name, resourceVersion: rv, labels: { zone: 'a' }, managedFields: managed, uid: `u-${name}` },
    spec: { podCIDR: '10.244.0.0/24' },
    status: {
      addresses: [
        { type: 'InternalIP', address },
        { type: 'Hostname', address: name },
      ],
      conditions: [
        { type: 'MemoryPressure', status: 'False' },
        { type: 'Ready', status: ready, reason: 'KubeletReady', lastHeartbeatTime: new Date() },
      ],
      images: [{ names: ['registry/image:1'], sizeBytes: 123456789 }],
    },
  };
}

function fatService(): V1Service {
  return {
    metadata: {
      name: 'demo',
      namespace: 'vc',
      resourceVersion: '5',
      managedFields: managed,
      annotations: { a: 'b' },
    },
    spec: {
      type: 'NodePort',
      clusterIP: '10.96.0.1',
      ports: [{ name: 'https', port: 443, nodePort: 30443, protocol: 'TCP' }],
    },
  };
}

describe('slim Kubernetes objects', () => {
  it('keep only what routing reads, and routing reads the same from them', () => {
    const selection = { addressType: 'internal' as const, excludeNotReady: true };
    const nodes = [fatNode('a', '10.0.0.1', '1'), fatNode('b', '10.0.0.2', '2', 'False')];
    const slim = nodes.map(slimNode);
    expect(selectNodeAddresses(slim, selection)).toEqual(selectNodeAddresses(nodes, selection));
    expect(serviceNodePort(slimService(fatService()), 'https')).toEqual({ nodePort: 30443 });
    expect(JSON.stringify(slim)).not.toMatch(/managedFields|images|labels|MemoryPressure|podCIDR/);
    expect(JSON.stringify(slimService(fatService()))).not.toMatch(/managedFields|annotations|clusterIP/);
  });
});

describe('KubernetesTopology caches', () => {
  let server: Server | undefined;
  let topology: KubernetesTopology | undefined;
  afterEach(async () => {
    await topology?.stop();
    server?.closeAllConnections();
    await new Promise((r) => server?.close(r));
  });

  it('hold the slim objects, listed and watched', async () => {
    const watches: Record<string, ServerResponse> = {};
    server = createServer((req, res) => {
      const url = new URL(req.url ?? '/', 'http://x');
      const kind = url.pathname.endsWith('/nodes') ? 'nodes' : 'services';
      res.setHeader('content-type', 'application/json');
      if (url.searchParams.get('watch') === 'true') {
        res.writeHead(200);
        res.flushHeaders();
        watches[kind] = res;
        return;
      }
      const items = kind === 'nodes' ? [fatNode('a', '10.0.0.1', '1')] : [fatService()];
      res.end(JSON.stringify({ kind: 'List', apiVersion: 'v1', metadata: { resourceVersion: '10' }, items }));
    });
    await new Promise<void>((r) => server?.listen(0, '127.0.0.1', r));
    const kc = new KubeConfig();
    kc.loadFromOptions({
      // Plain HTTP on loopback: the client asks for skipTLSVerify to allow it.
      clusters: [
        {
          name: 'c',
          server: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
          skipTLSVerify: true,
        },
      ],
      users: [{ name: 'u' }],
      contexts: [{ name: 'x', cluster: 'c', user: 'u' }],
      currentContext: 'x',
    });
    const changes: string[] = [];
    topology = new KubernetesTopology(
      kc,
      { addressType: 'internal', excludeNotReady: true },
      (r) => changes.push(r),
      createMetrics(),
      pino({ level: 'silent' }),
    );
    await topology.start();
    expect(topology.synced()).toBe(true);
    const target = { service: { namespace: 'vc', name: 'demo', port: 'https' } };
    expect(topology.endpointsFor(target)).toEqual({ endpoints: [{ address: '10.0.0.1', port: 30443 }] });
    const before = topology.revision();
    await waitFor(() => watches.nodes, 5000, 'the node watch');
    const event = { type: 'ADDED', object: fatNode('b', '10.0.0.2', '11') };
    watches.nodes?.write(`${JSON.stringify(event)}\n`);
    await waitFor(() => topology?.endpointsFor(target).endpoints.length === 2, 5000, 'the watched node');
    expect(topology.revision()).toBeGreaterThan(before);
    const cached = (topology as unknown as { nodes: { list(): V1Node[] } }).nodes.list();
    expect(cached).toHaveLength(2);
    expect(JSON.stringify(cached)).not.toMatch(/managedFields|images|labels/);
  });
});
