import { isIP } from 'node:net';
import type { V1Node, V1Service } from '@kubernetes/client-node';
import type { TopologyProblem } from './topology.js';

export type NodeAddressType = 'internal' | 'external';

export interface NodeSelection {
  addressType: NodeAddressType;
  /** Leave out nodes whose Ready condition is not True. */
  excludeNotReady: boolean;
}

const PREFERRED: Record<NodeAddressType, [string, string]> = {
  internal: ['InternalIP', 'ExternalIP'],
  external: ['ExternalIP', 'InternalIP'],
};

/**
 * The address HAProxy should use for a node: the first valid IP of the preferred type, else of the other type
 * (as the platform's runbook describes). Hostnames are never used: they would have to be resolved by HAProxy.
 */
export function nodeAddress(node: V1Node, type: NodeAddressType): string | undefined {
  const addresses = node.status?.addresses ?? [];
  for (const kind of PREFERRED[type]) {
    const found = addresses.find((a) => a.type === kind && isIP(a.address) !== 0);
    if (found) return found.address;
  }
  return undefined;
}

export function nodeEligible(node: V1Node, selection: NodeSelection): boolean {
  if (node.metadata?.deletionTimestamp) return false;
  if (!selection.excludeNotReady) return true;
  return node.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ?? false;
}

/** Addresses of the nodes that should receive traffic, sorted so that the result never depends on list order. */
export function selectNodeAddresses(nodes: readonly V1Node[], selection: NodeSelection): string[] {
  const addresses = new Set<string>();
  for (const node of nodes) {
    if (!nodeEligible(node, selection)) continue;
    const address = nodeAddress(node, selection.addressType);
    if (address) addresses.add(address);
  }
  return [...addresses].sort();
}

/** The NodePort behind a Service port given by number or by name. */
export function serviceNodePort(
  service: V1Service | undefined,
  port: number | string,
): { nodePort: number } | { problem: TopologyProblem } {
  if (!service) return { problem: 'service_not_found' };
  const type = service.spec?.type;
  if (type !== 'NodePort' && type !== 'LoadBalancer') return { problem: 'service_not_nodeport' };
  const match = service.spec?.ports?.find((p) =>
    typeof port === 'number' ? p.port === port : p.name === port,
  );
  if (!match?.nodePort) return { problem: 'service_port_not_found' };
  return { nodePort: match.nodePort };
}

/** What of a node matters to routing: a change to anything else (heartbeats, images) is not worth a pass. */
export function nodeFingerprint(node: V1Node, selection: NodeSelection): string {
  return `${nodeEligible(node, selection)}|${nodeAddress(node, selection.addressType) ?? ''}`;
}

export function serviceFingerprint(service: V1Service): string {
  const ports = (service.spec?.ports ?? [])
    .map((p) => `${p.name ?? ''}:${p.port}:${p.nodePort ?? ''}`)
    .sort();
  return `${service.spec?.type ?? ''}|${ports.join(',')}`;
}

/**
 * What of a node the topology keeps: its name and version, deletion mark, addresses and Ready condition.
 * The rest (managedFields, labels, images, the other conditions) is dropped as it arrives, as
 * controller-runtime's cache transforms do: at thousands of objects it is most of the memory.
 */
export function slimNode(node: V1Node): V1Node {
  const m = node.metadata ?? {};
  const ready = node.status?.conditions?.find((c) => c.type === 'Ready');
  return {
    metadata: {
      ...(m.name !== undefined ? { name: m.name } : {}),
      ...(m.resourceVersion !== undefined ? { resourceVersion: m.resourceVersion } : {}),
      ...(m.deletionTimestamp !== undefined ? { deletionTimestamp: m.deletionTimestamp } : {}),
    },
    status: {
      addresses: (node.status?.addresses ?? []).map((a) => ({ type: a.type, address: a.address })),
      ...(ready ? { conditions: [{ type: ready.type, status: ready.status }] } : {}),
    },
  };
}

/** What of a Service the topology keeps: its name, namespace, version, type and ports. */
export function slimService(service: V1Service): V1Service {
  const m = service.metadata ?? {};
  return {
    metadata: {
      ...(m.name !== undefined ? { name: m.name } : {}),
      ...(m.namespace !== undefined ? { namespace: m.namespace } : {}),
      ...(m.resourceVersion !== undefined ? { resourceVersion: m.resourceVersion } : {}),
    },
    spec: {
      ...(service.spec?.type !== undefined ? { type: service.spec.type } : {}),
      ports: (service.spec?.ports ?? []).map((p) => ({
        port: p.port,
        ...(p.name !== undefined ? { name: p.name } : {}),
        ...(p.nodePort !== undefined ? { nodePort: p.nodePort } : {}),
      })),
    },
  };
}
