import type { ClusterRecord } from '../model/cluster.js';
import { type ResolvedRoutes, type RouteClaim, resolveRoutes } from '../routes/route.js';
import type { Topology, TopologyProblem } from '../topology/topology.js';

export interface DesiredRoutes extends ResolvedRoutes {
  /** Clusters whose endpoints the topology could not fully resolve, with why. */
  topologyProblems: Map<string, TopologyProblem>;
}

/** Joins what kubebyon-api asked for with what the topology knows into validated routes. Pure. */
export function desiredRoutes(records: readonly ClusterRecord[], topology: Topology): DesiredRoutes {
  const topologyProblems = new Map<string, TopologyProblem>();
  const claims: RouteClaim[] = records.map((record) => {
    const answer = topology.endpointsFor(record.target);
    if (answer.problem) topologyProblems.set(record.name, answer.problem);
    return {
      cluster: record.name,
      host: record.host,
      endpoints: answer.endpoints,
      claimedAt: record.claimedAt,
    };
  });
  return { ...resolveRoutes(claims), topologyProblems };
}
