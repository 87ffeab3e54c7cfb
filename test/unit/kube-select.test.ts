import type { V1Node, V1Service } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import {
  nodeAddress,
  nodeFingerprint,
  selectNodeAddresses,
  serviceNodePort,
} from '../../src/topology/kube-select.js';

function node(name: string, addresses: Array<[string, string]>, ready = 'True', deleting = false): V1Node {
  return {
    metadata: { name, ...(deleting ? { deletionTimestamp: new Date() } : {}) },
    status: {
      addresses: addresses.map(([type, address]) => ({ type, address })),
      conditions: [{ type: 'Ready', status: ready }],
    },
  };
}

function service(type: string, ports: Array<{ name?: string; port: number; nodePort?: number }>): V1Service {
  return { metadata: { name: 's', namespace: 'ns' }, spec: { type, ports } };
}

describe('node address selection', () => {
  const both = node('a', [
    ['Hostname', 'node-a'],
    ['InternalIP', '10.0.0.1'],
    ['ExternalIP', '203.0.113.1'],
  ]);

  it('takes the preferred type and falls back to the other', () => {
    expect(nodeAddress(both, 'internal')).toBe('10.0.0.1');
    expect(nodeAddress(both, 'external')).toBe('203.0.113.1');
    expect(nodeAddress(node('b', [['InternalIP', '10.0.0.2']]), 'external')).toBe('10.0.0.2');
    expect(nodeAddress(node('c', [['ExternalIP', '203.0.113.3']]), 'internal')).toBe('203.0.113.3');
    expect(nodeAddress(node('d', [['Hostname', 'node-d']]), 'internal')).toBeUndefined();
  });

  it('leaves out nodes being deleted and, when asked, nodes that are not Ready', () => {
    const nodes = [
      both,
      node('b', [['InternalIP', '10.0.0.2']], 'False'),
      node('c', [['InternalIP', '10.0.0.3']], 'Unknown'),
      node('d', [['InternalIP', '10.0.0.4']], 'True', true),
      node('e', [['InternalIP', '10.0.0.1']]),
    ];
    expect(selectNodeAddresses(nodes, { addressType: 'internal', excludeNotReady: true })).toEqual([
      '10.0.0.1',
    ]);
    expect(selectNodeAddresses(nodes, { addressType: 'internal', excludeNotReady: false })).toEqual([
      '10.0.0.1',
      '10.0.0.2',
      '10.0.0.3',
    ]);
  });

  it('fingerprints only what routing depends on', () => {
    const sel = { addressType: 'internal' as const, excludeNotReady: true };
    const heartbeat = structuredClone(both);
    heartbeat.status?.conditions?.push({ type: 'MemoryPressure', status: 'False' });
    expect(nodeFingerprint(heartbeat, sel)).toBe(nodeFingerprint(both, sel));
    expect(nodeFingerprint(node('a', [['InternalIP', '10.0.0.9']]), sel)).not.toBe(
      nodeFingerprint(both, sel),
    );
    expect(nodeFingerprint(node('a', [['InternalIP', '10.0.0.1']], 'False'), sel)).not.toBe(
      nodeFingerprint(node('a', [['InternalIP', '10.0.0.1']]), sel),
    );
  });
});

describe('serviceNodePort', () => {
  const svc = service('NodePort', [
    { name: 'https', port: 443, nodePort: 31443 },
    { name: 'metrics', port: 9090, nodePort: 31090 },
  ]);

  it('finds the NodePort by port number or by name', () => {
    expect(serviceNodePort(svc, 443)).toEqual({ nodePort: 31443 });
    expect(serviceNodePort(svc, 'metrics')).toEqual({ nodePort: 31090 });
    expect(serviceNodePort(service('LoadBalancer', [{ port: 443, nodePort: 30001 }]), 443)).toEqual({
      nodePort: 30001,
    });
  });

  it('says why there is none', () => {
    expect(serviceNodePort(undefined, 443)).toEqual({ problem: 'service_not_found' });
    expect(serviceNodePort(service('ClusterIP', [{ port: 443 }]), 443)).toEqual({
      problem: 'service_not_nodeport',
    });
    expect(serviceNodePort(svc, 8443)).toEqual({ problem: 'service_port_not_found' });
    expect(serviceNodePort(svc, 'http')).toEqual({ problem: 'service_port_not_found' });
  });
});
