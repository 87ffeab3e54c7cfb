import { createHash } from 'node:crypto';
import { z } from 'zod';
import { type ClusterRecord, ClusterTarget } from '../model/cluster.js';
import { sameNetworks, validateNetworks } from '../routes/networks.js';
import type { ClusterInput, PublishedStatus, WriteStamp } from './desired-store.js';

/**
 * The pure half of the Kubernetes store: a cluster <-> ClusterRoute object, the stamp rule that refuses
 * replayed signed writes, and the resourceVersion order. No I/O here.
 */

export const GROUP = 'kubebyon.io';
export const VERSION = 'v1alpha1';
export const PLURAL = 'clusterroutes';
export const KIND = 'ClusterRoute';

/** Signatures kept per signedAt (the CRD's maxItems). */
export const MAX_SIGNATURES = 64;

export const RouteSpec = z.object({
  cluster: z.string(),
  host: z.string(),
  target: ClusterTarget,
  /** Canonical and sorted as this store writes it; absent when open to all. */
  authorizedNetworks: z.array(z.string()).optional(),
  claimedAt: z.number(),
  updatedAt: z.number(),
  deleted: z.boolean().optional(),
  signedAt: z.number().optional(),
  signatures: z.array(z.string()).optional(),
});
export type RouteSpec = z.infer<typeof RouteSpec>;

const InstanceStatus = z.object({
  name: z.string(),
  state: z.string(),
  reason: z.string().nullish(),
  lastAppliedAt: z.string().nullish(),
});

export const RouteStatus = z.object({
  state: z.string().optional(),
  reason: z.string().nullish(),
  apiEndpoint: z.string().nullish(),
  lastAppliedAt: z.string().nullish(),
  observedUpdatedAt: z.number().optional(),
  instances: z.array(InstanceStatus).optional(),
});
export type RouteStatus = z.infer<typeof RouteStatus>;

/** A ClusterRoute as the store keeps it: what it reads, nothing else (no managedFields, labels, ...). */
export interface CachedRoute {
  name: string;
  resourceVersion: string;
  spec: RouteSpec;
  status?: RouteStatus | undefined;
}

/** The parts of a Kubernetes object this module reads. */
export interface RawRoute {
  metadata?: { name?: string; namespace?: string; resourceVersion?: string };
  spec?: unknown;
  status?: unknown;
}

const DNS_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;

/**
 * The object name of a cluster: the name itself when Kubernetes accepts it as one (so `kubectl get kcr` is
 * readable), otherwise a hash of it (cluster names may hold `_` and capitals; object names may not).
 */
export function objectName(cluster: string): string {
  if (cluster.length <= 253 && DNS_SUBDOMAIN.test(cluster)) return cluster;
  return `h-${createHash('sha256').update(cluster).digest('hex').slice(0, 40)}`;
}

/**
 * The object as the store caches it, or why it is ignored: a spec the schema does not describe, or a
 * `spec.cluster` that does not map to the object's name (two objects must never claim one cluster).
 */
export function parseRoute(raw: RawRoute): { route: CachedRoute } | { problem: string } {
  const name = raw.metadata?.name ?? '';
  const spec = RouteSpec.safeParse(raw.spec);
  if (!spec.success) return { problem: `invalid spec: ${spec.error.issues[0]?.message ?? 'unknown'}` };
  if (objectName(spec.data.cluster) !== name)
    return { problem: `spec.cluster ${JSON.stringify(spec.data.cluster)} does not map to this name` };
  // The CRD's schema refuses most bad entries; what it lets through (`10.0.0.1` beside `10.0.0.1/32`, an
  // IPv4-compatible IPv6) is refused here, like any invalid spec. A list written by hand in another order or
  // spelling is read in the canonical form the webhook would have stored.
  const { authorizedNetworks, ...rest } = spec.data;
  const networks = validateNetworks(authorizedNetworks ?? []);
  if (!networks.ok) {
    const at = networks.index === undefined ? '' : `[${networks.index}]`;
    return { problem: `invalid spec.authorizedNetworks${at}: ${networks.reason}: ${networks.detail}` };
  }
  const status = RouteStatus.safeParse(raw.status ?? {});
  return {
    route: {
      name,
      resourceVersion: raw.metadata?.resourceVersion ?? '',
      spec: networks.networks.length > 0 ? { ...rest, authorizedNetworks: networks.networks } : rest,
      ...(status.success && raw.status ? { status: status.data } : {}),
    },
  };
}

/** The cluster a (non-tombstone) spec describes. */
export function toRecord(spec: RouteSpec): ClusterRecord | undefined {
  if (spec.deleted) return undefined;
  const { cluster, host, target, authorizedNetworks, claimedAt, updatedAt } = spec;
  return { name: cluster, host, target, ...listed(authorizedNetworks), claimedAt, updatedAt };
}

/** `{ authorizedNetworks }` when the list has entries, else nothing: an open cluster carries no field. */
export function listed(networks: string[] | undefined): { authorizedNetworks?: string[] } {
  return networks && networks.length > 0 ? { authorizedNetworks: networks } : {};
}

/** The whole object to create or replace (`resourceVersion` set for a replace: the API's precondition). */
export function routeObject(namespace: string, spec: RouteSpec, resourceVersion?: string) {
  return {
    apiVersion: `${GROUP}/${VERSION}`,
    kind: KIND,
    metadata: {
      name: objectName(spec.cluster),
      namespace,
      ...(resourceVersion ? { resourceVersion } : {}),
    },
    spec,
  };
}

/**
 * The replay rule: a signed write is applied only when it is newer than the signed write the stored spec
 * came from, or as old but with a signature not seen at that second. Unsigned writes (bearer mode) always are.
 */
export function admits(stored: RouteSpec | undefined, stamp: WriteStamp | undefined): boolean {
  if (!stamp || stored?.signedAt === undefined) return true;
  if (stamp.signedAt !== stored.signedAt) return stamp.signedAt > stored.signedAt;
  return !(stored.signatures ?? []).includes(stamp.signature);
}

/** Whether the stored spec came from exactly this signed write (the same request, seen again). */
export function appliedBy(stored: RouteSpec | undefined, stamp: WriteStamp): boolean {
  return stored?.signedAt === stamp.signedAt && (stored.signatures ?? []).includes(stamp.signature);
}

/** The signedAt/signatures a spec carries after `stamp` was admitted (kept as they were without one). */
function stamped(previous: RouteSpec | undefined, stamp: WriteStamp | undefined) {
  if (!stamp) {
    if (previous?.signedAt === undefined) return {};
    return { signedAt: previous.signedAt, signatures: previous.signatures ?? [] };
  }
  const same = previous?.signedAt === stamp.signedAt ? (previous.signatures ?? []) : [];
  return { signedAt: stamp.signedAt, signatures: [...same, stamp.signature].slice(-MAX_SIGNATURES) };
}

// Each version has its own stamp, even two within one millisecond, tombstones included (as ClusterStore).
function nextStamp(previous: RouteSpec | undefined, now: number): number {
  return previous ? Math.max(now, previous.updatedAt + 1) : now;
}

/** The spec after an upsert: a claim dates from when the live cluster first asked for its current host. */
export function upsertSpec(
  previous: RouteSpec | undefined,
  input: ClusterInput,
  stamp: WriteStamp | undefined,
  now: number,
): RouteSpec {
  const live = previous && !previous.deleted;
  return {
    cluster: input.name,
    host: input.host,
    target: input.target,
    ...listed(input.authorizedNetworks),
    claimedAt: live && previous.host === input.host ? previous.claimedAt : now,
    updatedAt: nextStamp(previous, now),
    ...stamped(previous, stamp),
  };
}

/** The spec after a signed delete: a tombstone, so that an older replayed write cannot revive the cluster. */
export function tombstoneSpec(previous: RouteSpec, stamp: WriteStamp, now: number): RouteSpec {
  return {
    ...previous,
    updatedAt: previous.deleted ? previous.updatedAt : nextStamp(previous, now),
    deleted: true,
    ...stamped(previous, stamp),
  };
}

/** The spec when only the stamp is recorded (an unchanged cluster in a signed replaceAll). */
export function restampedSpec(previous: RouteSpec, stamp: WriteStamp): RouteSpec {
  return { ...previous, ...stamped(previous, stamp) };
}

export function sameInput(spec: RouteSpec, input: ClusterInput): boolean {
  return (
    !spec.deleted &&
    spec.host === input.host &&
    JSON.stringify(spec.target) === JSON.stringify(input.target) &&
    sameNetworks(spec.authorizedNetworks, input.authorizedNetworks)
  );
}

/** Whether two specs describe the same cluster version (stamps aside): what a reconcile pass cares about. */
export function sameRecord(a: RouteSpec | undefined, b: RouteSpec | undefined): boolean {
  const ra = a && toRecord(a);
  const rb = b && toRecord(b);
  return JSON.stringify(ra) === JSON.stringify(rb);
}

/** Whether resourceVersion `a` is older than `b`: only known when both are integers (etcd revisions). */
export function olderVersion(a: string, b: string | undefined): boolean {
  if (b === undefined || !/^\d+$/.test(a) || !/^\d+$/.test(b)) return false;
  return BigInt(a) < BigInt(b);
}

export function toStatus(p: PublishedStatus): RouteStatus {
  return {
    state: p.state,
    reason: p.reason,
    apiEndpoint: p.api_endpoint,
    lastAppliedAt: p.last_applied_at,
    observedUpdatedAt: p.observed,
    instances: p.instances.map((i) => ({
      name: i.name,
      state: i.state,
      reason: i.reason,
      lastAppliedAt: i.last_applied_at,
    })),
  };
}

/** The published status in a stored one (null for fields a merge patch removed), if it has a state. */
export function fromStatus(s: RouteStatus | undefined): PublishedStatus | undefined {
  if (!s?.state) return undefined;
  return {
    state: s.state,
    reason: s.reason ?? null,
    api_endpoint: s.apiEndpoint ?? null,
    last_applied_at: s.lastAppliedAt ?? null,
    observed: s.observedUpdatedAt ?? 0,
    instances: (s.instances ?? []).map((i) => ({
      name: i.name,
      state: i.state,
      reason: i.reason ?? null,
      last_applied_at: i.lastAppliedAt ?? null,
    })),
  };
}

export function sameStatus(a: PublishedStatus | undefined, b: PublishedStatus | undefined): boolean {
  return JSON.stringify(a) === JSON.stringify(b);
}
