import type { ClusterTarget } from '../model/cluster.js';
import { validateHost } from '../routes/host.js';
import { validateNetworks } from '../routes/networks.js';
import { validateClusterName } from '../routes/route.js';
import type { ClusterInput } from '../store/desired-store.js';
import type { ClusterBody, ClusterSetBody } from './schemas.js';

/** Only this mode is routed through HAProxy; a cluster with any other mode has no route. */
export const ROUTED_MODE = 'loadbalancer';

export interface FieldError {
  status: 400 | 422;
  field: string;
  reason: string;
  detail: string;
}

export type CheckedCluster =
  | { ok: true; routed: true; input: ClusterInput }
  | { ok: true; routed: false }
  | { ok: false; error: FieldError };

/**
 * Applies the runbook's rules to one well-formed cluster body. `field` prefixes error fields, so that an item
 * of the full set is named (`clusters.3.control_plane_host`). Pure.
 */
export function checkCluster(name: string, body: ClusterBody, field = ''): CheckedCluster {
  const badName = checkName(name, field);
  if (badName) return { ok: false, error: badName };
  if (body.public_access_mode !== ROUTED_MODE) return { ok: true, routed: false };
  const host = validateHost(body.control_plane_host);
  if (!host.ok) {
    return {
      ok: false,
      error: { status: 422, field: `${field}control_plane_host`, reason: host.reason, detail: host.detail },
    };
  }
  if ((body.service === undefined) === (body.node_port === undefined)) {
    return {
      ok: false,
      error: {
        status: 422,
        field: `${field}service`,
        reason: body.service ? 'target_ambiguous' : 'target_missing',
        detail: 'give exactly one of service (a NodePort Service to look up) or node_port',
      },
    };
  }
  const target: ClusterTarget = body.service ? { service: body.service } : { nodePort: body.node_port ?? 0 };
  const networks = validateNetworks(body.authorized_networks ?? []);
  if (!networks.ok) {
    const at = networks.index === undefined ? '' : `.${networks.index}`;
    return {
      ok: false,
      error: {
        status: 422,
        field: `${field}authorized_networks${at}`,
        reason: networks.reason,
        detail: networks.detail,
      },
    };
  }
  // Canonical and sorted: the same list in any order or spelling is the same record. Empty: left out.
  const authorized = networks.networks.length > 0 ? { authorizedNetworks: networks.networks } : {};
  return { ok: true, routed: true, input: { name, host: host.host, target, ...authorized } };
}

/**
 * Why `name` cannot name a cluster, or undefined: the one rule for a name on every verb, so that a DELETE or
 * GET of a name no PUT could store is refused alike (400), not answered as if it might exist. Pure.
 */
export function checkName(name: string, field = ''): FieldError | undefined {
  const nameCheck = validateClusterName(name);
  if (nameCheck.ok) return undefined;
  return { status: 400, field: `${field}name`, reason: 'cluster_name_invalid', detail: nameCheck.detail };
}

export type CheckedClusterSet = { ok: true; inputs: ClusterInput[] } | { ok: false; error: FieldError };

/**
 * The full desired set (`PUT /v1/clusters`, or a clusters file given to the command line): every item
 * checked like a single PUT, names unique; the first bad item refuses the whole set. Pure.
 */
export function checkClusterSet(body: ClusterSetBody): CheckedClusterSet {
  const inputs = [];
  const names = new Set<string>();
  for (const [i, { name, ...cluster }] of body.clusters.entries()) {
    if (names.has(name)) {
      return {
        ok: false,
        error: {
          status: 422,
          field: `clusters.${i}.name`,
          reason: 'duplicate_name',
          detail: `cluster ${name} is listed twice`,
        },
      };
    }
    names.add(name);
    const checked = checkCluster(name, cluster, `clusters.${i}.`);
    if (!checked.ok) return checked;
    if (checked.routed) inputs.push(checked.input);
  }
  return { ok: true, inputs };
}
