import { readFileSync } from 'node:fs';
import { z } from 'zod';
import { parseBindAddr } from './bind.js';

/**
 * The settings of the shapes past one process and one HAProxy: several HAProxy instances (a list, or pods
 * found by label), the desired state in the Kubernetes API, and leader election among replicas. Every one
 * is off by default: the single-node shape needs none.
 */

/** Instance names become a metric label and a folder name: short DNS labels, at most 16 instances. */
const INSTANCE_NAME = /^[a-z0-9](?:[a-z0-9-]{0,38}[a-z0-9])?$/;
export const MAX_INSTANCES = 16;
const DNS_NAME = /^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/;
const NAMESPACE_FILE = '/var/run/secrets/kubernetes.io/serviceaccount/namespace';

const int = (min: number, max: number) => z.coerce.number().int().min(min).max(max);
const absolutePath = z.string().regex(/^\//, 'must be an absolute path');

/** One instance in `KUBEBYON_HAPROXY_INSTANCES`: a name, and what differs from the provider's settings. */
const InstanceEntry = z
  .object({
    name: z.string().regex(INSTANCE_NAME, 'must be a lowercase DNS label of at most 40 characters'),
    url: z.url({ protocol: /^https?$/ }).optional(),
    masterSocket: absolutePath.optional(),
    ownedFile: absolutePath.optional(),
    checkFiles: z.array(absolutePath).min(1).optional(),
    haproxyBin: z.string().min(1).optional(),
    /** Where this instance's frontend binds, when not KUBEBYON_HAPROXY_BIND_ADDR (instances sharing a host). */
    bind: z
      .string()
      .transform((raw, ctx) => {
        const parsed = parseBindAddr(raw);
        if (parsed.ok) return parsed.bind;
        ctx.addIssue({ code: 'custom', message: parsed.detail });
        return z.NEVER;
      })
      .optional(),
  })
  .strict();
export type InstanceEntry = z.infer<typeof InstanceEntry>;

const InstanceList = z
  .string()
  .transform((raw, ctx) => {
    if (raw.trim() === '') return [];
    try {
      return JSON.parse(raw) as unknown;
    } catch (err) {
      ctx.addIssue({ code: 'custom', message: `not JSON: ${(err as Error).message}` });
      return z.NEVER;
    }
  })
  .pipe(z.array(InstanceEntry).max(MAX_INSTANCES, `at most ${MAX_INSTANCES} instances`))
  .superRefine((list, ctx) => {
    const names = new Set<string>();
    for (const entry of list) {
      if (names.has(entry.name))
        ctx.addIssue({ code: 'custom', message: `instance ${entry.name} is named twice` });
      names.add(entry.name);
    }
    // Two instances writing one file or socket would be one HAProxy driven twice.
    for (const key of ['url', 'masterSocket', 'ownedFile'] as const) {
      const values = list.map((e) => e[key]).filter((v) => v !== undefined);
      if (new Set(values).size !== values.length)
        ctx.addIssue({ code: 'custom', message: `two instances share one ${key}` });
    }
  });

const FleetFields = z.object({
  KUBEBYON_HAPROXY_INSTANCES: InstanceList,
  KUBEBYON_HAPROXY_POD_SELECTOR: z.string().max(1024),
  KUBEBYON_HAPROXY_POD_NAMESPACE: z.union([
    z.literal(''),
    z.string().regex(DNS_NAME, 'must be a namespace name'),
  ]),
  KUBEBYON_DATAPLANE_POD_PORT: int(1, 65535),
  KUBEBYON_STATE_STORE: z.enum(['file', 'kubernetes']),
  KUBEBYON_KUBERNETES_NAMESPACE: z.union([
    z.literal(''),
    z.string().regex(DNS_NAME, 'must be a namespace name'),
  ]),
  KUBEBYON_LEADER_ELECTION: z.enum(['', 'true', 'false']),
  KUBEBYON_LEADER_ELECTION_ID: z.string().max(253),
  KUBEBYON_LEASE_NAME: z.string().regex(DNS_NAME, 'must be a DNS label'),
  KUBEBYON_APPLY: z.enum(['leader', 'always']),
  KUBEBYON_LEASE_DURATION_MS: int(1000, 600_000),
  KUBEBYON_LEASE_RENEW_DEADLINE_MS: int(500, 600_000),
  KUBEBYON_LEASE_RETRY_PERIOD_MS: int(100, 600_000),
});

export interface FleetConfig {
  /** Instances given as a list; empty: the one HAProxy the provider's settings name. */
  instances: InstanceEntry[];
  /** HAProxy pods found by label (the Data Plane API provider only). */
  discovery?: { namespace: string; selector: string; port: number };
  store: 'file' | 'kubernetes';
  /** Where ClusterRoutes and the Lease live. */
  namespace: string;
  leaderElection?: {
    identity: string;
    leaseName: string;
    leaseDurationMs: number;
    renewDeadlineMs: number;
    retryPeriodMs: number;
    /**
     * `leader`: only the Lease's holder applies (replicas share the HAProxy instances). `always`: every
     * replica applies to its own HAProxy (the sidecar shape), and the Lease only picks the one that
     * publishes statuses and sweeps tombstones.
     */
    apply: 'leader' | 'always';
  };
}

/** Reads the fleet settings from `merged` (defaults applied); problems are pushed as `NAME: reason`. */
export function fleetConfigOf(
  merged: Record<string, string>,
  providerKind: string,
  problems: string[],
  hostname: () => string,
): FleetConfig | undefined {
  const parsed = FleetFields.safeParse(merged);
  if (!parsed.success) {
    for (const issue of parsed.error.issues)
      problems.push(`${String(issue.path[0] ?? '')}: ${issue.message}`);
    return undefined;
  }
  const e = parsed.data;
  const start = problems.length;
  for (const entry of e.KUBEBYON_HAPROXY_INSTANCES) {
    const wrong = entryProblem(entry, providerKind);
    if (wrong) problems.push(`KUBEBYON_HAPROXY_INSTANCES: instance ${entry.name}: ${wrong}`);
  }
  if (e.KUBEBYON_HAPROXY_POD_SELECTOR && e.KUBEBYON_HAPROXY_INSTANCES.length > 0)
    problems.push('KUBEBYON_HAPROXY_POD_SELECTOR: set either it or KUBEBYON_HAPROXY_INSTANCES, not both');
  if (e.KUBEBYON_HAPROXY_POD_SELECTOR && providerKind !== 'dataplaneapi')
    problems.push('KUBEBYON_HAPROXY_POD_SELECTOR: pods are reached through their Data Plane API only');
  const leads =
    e.KUBEBYON_LEADER_ELECTION === ''
      ? e.KUBEBYON_STATE_STORE === 'kubernetes'
      : e.KUBEBYON_LEADER_ELECTION === 'true';
  if (leads && e.KUBEBYON_STATE_STORE !== 'kubernetes')
    problems.push('KUBEBYON_LEADER_ELECTION: replicas need a shared state (KUBEBYON_STATE_STORE=kubernetes)');
  // client-go's rule: the lease outlives the renew deadline, which outlives a retry (with its jitter).
  // Replicas that all apply must each drive an HAProxy of their own, never the same discovered pods.
  if (e.KUBEBYON_APPLY === 'always' && e.KUBEBYON_HAPROXY_POD_SELECTOR)
    problems.push(
      'KUBEBYON_APPLY: always is for an HAProxy beside each replica; with KUBEBYON_HAPROXY_POD_SELECTOR every replica would drive every pod',
    );
  if (e.KUBEBYON_APPLY === 'always' && !leads)
    problems.push('KUBEBYON_APPLY: always needs leader election (KUBEBYON_STATE_STORE=kubernetes)');
  if (leads && !(e.KUBEBYON_LEASE_DURATION_MS > e.KUBEBYON_LEASE_RENEW_DEADLINE_MS))
    problems.push('KUBEBYON_LEASE_DURATION_MS: must be greater than KUBEBYON_LEASE_RENEW_DEADLINE_MS');
  if (leads && !(e.KUBEBYON_LEASE_RENEW_DEADLINE_MS > e.KUBEBYON_LEASE_RETRY_PERIOD_MS * 1.2))
    problems.push(
      'KUBEBYON_LEASE_RENEW_DEADLINE_MS: must be greater than 1.2 × KUBEBYON_LEASE_RETRY_PERIOD_MS',
    );
  if (problems.length > start) return undefined;
  const namespace = e.KUBEBYON_KUBERNETES_NAMESPACE || podNamespace() || 'kubebyon-system';
  return {
    instances: e.KUBEBYON_HAPROXY_INSTANCES,
    ...(e.KUBEBYON_HAPROXY_POD_SELECTOR
      ? {
          discovery: {
            namespace: e.KUBEBYON_HAPROXY_POD_NAMESPACE || namespace,
            selector: e.KUBEBYON_HAPROXY_POD_SELECTOR,
            port: e.KUBEBYON_DATAPLANE_POD_PORT,
          },
        }
      : {}),
    store: e.KUBEBYON_STATE_STORE,
    namespace,
    ...(leads
      ? {
          leaderElection: {
            identity: e.KUBEBYON_LEADER_ELECTION_ID || hostname(),
            leaseName: e.KUBEBYON_LEASE_NAME,
            leaseDurationMs: e.KUBEBYON_LEASE_DURATION_MS,
            renewDeadlineMs: e.KUBEBYON_LEASE_RENEW_DEADLINE_MS,
            retryPeriodMs: e.KUBEBYON_LEASE_RETRY_PERIOD_MS,
            apply: e.KUBEBYON_APPLY,
          },
        }
      : {}),
  };
}

/** What an entry must and must not say for the chosen provider. */
function entryProblem(entry: InstanceEntry, providerKind: string): string | undefined {
  const stock =
    entry.masterSocket !== undefined || entry.ownedFile !== undefined || entry.checkFiles !== undefined;
  if (providerKind === 'dataplaneapi') {
    if (!entry.url) return 'needs url (its Data Plane API)';
    if (stock) return 'masterSocket, ownedFile and checkFiles are for KUBEBYON_PROVIDER=haproxy';
  }
  if (providerKind === 'haproxy') {
    if (!entry.masterSocket || !entry.ownedFile) return 'needs masterSocket and ownedFile';
    if (entry.url) return 'url is for KUBEBYON_PROVIDER=dataplaneapi';
  }
  if (providerKind === 'memory' && (entry.url || stock))
    return 'the memory provider takes a name (and bind) only';
  return undefined;
}

function podNamespace(): string | undefined {
  try {
    return readFileSync(NAMESPACE_FILE, 'utf8').trim() || undefined;
  } catch {
    return undefined;
  }
}
