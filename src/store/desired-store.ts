import type { ClusterRecord, ClusterTarget } from '../model/cluster.js';

/**
 * Where the desired state lives, as the webhook and the reconcile loop see it: the local file store
 * (`ClusterStore`, the default outside Kubernetes) or the Kubernetes API (`KubeClusterStore`, one
 * ClusterRoute object per cluster, shared by every replica).
 */

export type ClusterInput = {
  name: string;
  host: string;
  target: ClusterTarget;
  /** Canonical and sorted (`validateNetworks`); absent when the cluster is open to all (never empty). */
  authorizedNetworks?: string[] | undefined;
};

/**
 * The signed write a change came from: the caller's timestamp (seconds) and signature. With it a store shared
 * by replicas refuses a write older than the one it holds for a cluster (`StaleWriteError`), so that a
 * signed write replayed to another replica cannot roll the cluster back. Absent in bearer mode.
 */
export interface WriteStamp {
  signedAt: number;
  signature: string;
}

/** A signed write older than (or the same as) the one a cluster's stored version came from. */
export class StaleWriteError extends Error {
  constructor(
    readonly cluster: string,
    readonly storedSignedAt: number,
  ) {
    super(
      `cluster ${cluster}: a change signed at ${storedSignedAt} or later is stored; an older or repeated signed write is refused`,
    );
    this.name = 'StaleWriteError';
  }
}

/** How one HAProxy instance stands with a cluster (the per-instance part of its status). */
export interface InstanceState {
  name: string;
  state: string;
  reason: string | null;
  last_applied_at: string | null;
}

/** What the leader publishes for a cluster (the ClusterRoute's status subresource). */
export interface PublishedStatus {
  state: string;
  reason: string | null;
  api_endpoint: string | null;
  last_applied_at: string | null;
  /** The version (`updatedAt`) of the cluster this status was made from. */
  observed: number;
  instances: InstanceState[];
}

export interface DesiredStore {
  list(): ClusterRecord[];
  get(name: string): ClusterRecord | undefined;
  /** Inserts or replaces one cluster; resolves once the change is stored (on disk, or in the API server). */
  upsert(input: ClusterInput, stamp?: WriteStamp): Promise<ClusterRecord>;
  /** Removes one cluster; resolves with whether it existed, once stored. */
  delete(name: string, stamp?: WriteStamp): Promise<boolean>;
  /** Makes `inputs` the whole desired set; resolves once stored. */
  replaceAll(inputs: ClusterInput[], stamp?: WriteStamp): Promise<{ removed: string[] }>;
  /** Whether changes can be stored now. */
  health(): Promise<{ ok: boolean; detail?: string }>;
}
