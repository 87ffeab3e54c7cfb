import type { ClusterTarget } from '../model/cluster.js';
import type { Endpoint } from '../routes/endpoint.js';

/** Why a cluster has no (or fewer) endpoints than it should: reported as its `degraded` reason. */
export type TopologyProblem =
  | 'no_nodes'
  | 'service_lookup_unavailable'
  | 'service_not_found'
  | 'service_not_nodeport'
  | 'service_port_not_found';

export interface TopologyAnswer {
  endpoints: Endpoint[];
  problem?: TopologyProblem;
}

/** Where a cluster's endpoints come from: node addresses × the NodePort that reaches its API server. */
export interface Topology {
  endpointsFor(target: ClusterTarget): TopologyAnswer;
  /**
   * Whether the topology has been read at least once. Until then its answers mean "unknown", not "no nodes",
   * and nothing may be applied from them (that would wipe every server).
   */
  synced(): boolean;
  /**
   * A number that moves whenever an answer of `endpointsFor` may have changed: answers are remembered while
   * it stays. Without it, every answer is asked for afresh.
   */
  revision?(): number;
}

/**
 * Node addresses from configuration, NodePorts from the webhook's `node_port`: for setups without a
 * Kubernetes API to watch. A cluster that names a Service cannot be resolved here and is degraded.
 */
export class StaticTopology implements Topology {
  constructor(private readonly nodeAddresses: readonly string[]) {}

  synced(): boolean {
    return true;
  }

  /** Its answers never change. */
  revision(): number {
    return 0;
  }

  endpointsFor(target: ClusterTarget): TopologyAnswer {
    if (!('nodePort' in target)) return { endpoints: [], problem: 'service_lookup_unavailable' };
    if (this.nodeAddresses.length === 0) return { endpoints: [], problem: 'no_nodes' };
    return { endpoints: this.nodeAddresses.map((address) => ({ address, port: target.nodePort })) };
  }
}
