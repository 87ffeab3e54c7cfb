import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { CoreV1Api, KubernetesObjectApi, loadAllYaml, type V1Node } from '@kubernetes/client-node';
import { chartRbac } from '../../test/support/chart.js';
import { type KubeApiserver, startKubeApiserver } from '../../test/support/kube-apiserver.js';

const NODE = 'node-1';

/**
 * The project's real kube-apiserver (etcd + kube-apiserver on loopback) with one Ready node whose
 * InternalIP the benchmark moves between loopback addresses. The service watches it as the ServiceAccount
 * of the chart's RBAC; clusters reach it by `node_port`.
 */
export interface BenchKube {
  /** A kubeconfig for the adapter's identity. */
  kubeconfig: string;
  setNodeAddress(address: string): Promise<void>;
  stop(): Promise<void>;
}

function nodeStatus(address: string): NonNullable<V1Node['status']> {
  return {
    addresses: [
      { type: 'InternalIP', address },
      { type: 'Hostname', address: NODE },
    ],
    conditions: [{ type: 'Ready', status: 'True', reason: 'Bench', lastHeartbeatTime: new Date() }],
  };
}

export async function startBenchKube(dir: string, address: string): Promise<BenchKube> {
  const kube: KubeApiserver = await startKubeApiserver();
  try {
    const admin = kube.admin.makeApiClient(CoreV1Api);
    const objects = kube.admin.makeApiClient(KubernetesObjectApi);
    for (const manifest of loadAllYaml(
      'apiVersion: v1\nkind: Namespace\nmetadata: {name: kubebyon-system}\n',
    ))
      await objects.create(manifest);
    for (const manifest of chartRbac()) await objects.create(manifest);
    await admin.createNode({ body: { metadata: { name: NODE } } });
    const setNodeAddress = async (to: string) => {
      const current = await admin.readNodeStatus({ name: NODE });
      await admin.replaceNodeStatus({ name: NODE, body: { ...current, status: nodeStatus(to) } });
    };
    await setNodeAddress(address);
    const kubeconfig = join(dir, 'kubeconfig');
    writeFileSync(kubeconfig, kube.adapter.exportConfig());
    return { kubeconfig, setNodeAddress, stop: () => kube.stop() };
  } catch (err) {
    await kube.stop();
    throw err;
  }
}
