import { z } from 'zod';
import { MAX_AUTHORIZED_NETWORKS, MAX_NETWORK_LENGTH, NETWORK_PATTERN } from '../routes/networks.js';

const DNS_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
// IANA_SVC_NAME, as Kubernetes checks port names: at least one letter (a Service port named "80" cannot
// exist, so the cluster would stay degraded) and no "--".
const PORT_NAME = /^(?=[-a-z0-9]*[a-z])(?!.*--)[a-z0-9](?:[-a-z0-9]*[a-z0-9])?$/;

/**
 * `authorized_networks`: its shape only (an array of strings, or null). What the entries say (CIDRs, their
 * count, duplicates) is the routing rules' to check (`validateNetworks`, 422 with the entry and the reason),
 * so the limits here are for the document: a list of 65 gets `too_many_networks`, not a shape error.
 */
const AuthorizedNetworks = z
  .array(
    z.string().meta({
      maxLength: MAX_NETWORK_LENGTH,
      pattern: NETWORK_PATTERN,
      examples: ['203.0.113.0/24', '198.51.100.7', '2001:db8::/32'],
    }),
  )
  .meta({ maxItems: MAX_AUTHORIZED_NETWORKS })
  .nullable()
  .optional()
  .meta({
    description:
      'Who may reach the cluster: IPv4 and IPv6 CIDRs, a bare address meaning /32 or /128; absent, null or ' +
      `empty: open to all. At most ${MAX_AUTHORIZED_NETWORKS}, no duplicates, no host bits (10.0.0.5/24 is ` +
      'refused: write 10.0.0.0/24 or 10.0.0.5), no IPv4-mapped IPv6, no zone ids. Stored and shown in canonical ' +
      'form, sorted. A PUT without it opens the cluster. Refused entries get 422 with field ' +
      'authorized_networks.<index> and reason network_invalid, network_prefix_invalid, ' +
      'network_host_bits_set, network_ipv4_mapped, network_duplicate or too_many_networks.',
  });

/** Body of `PUT /v1/clusters/{name}`: what kubebyon-api knows of one cluster. */
export const ClusterBody = z
  .object({
    control_plane_host: z.string().min(1).max(300),
    public_access_mode: z.string().min(1).max(64),
    service: z
      .object({
        namespace: z.string().max(63).regex(DNS_LABEL, 'must be a DNS label'),
        name: z.string().max(63).regex(DNS_LABEL, 'must be a DNS label'),
        port: z.union([
          z.number().int().min(1).max(65535),
          z
            .string()
            .max(15)
            .regex(
              PORT_NAME,
              'must be a port number or a port name: 1-15 of a-z 0-9 -, with a letter, no leading, trailing or double -',
            ),
        ]),
      })
      .strict()
      .optional(),
    node_port: z.number().int().min(1).max(65535).optional(),
    authorized_networks: AuthorizedNetworks,
  })
  .strict();
export type ClusterBody = z.infer<typeof ClusterBody>;

/** Body of `PUT /v1/clusters`: the full desired set; clusters not in it are removed. */
export const ClusterSetBody = z
  .object({
    clusters: z.array(ClusterBody.extend({ name: z.string().min(1).max(253) }).strict()).max(20_000),
  })
  .strict();
export type ClusterSetBody = z.infer<typeof ClusterSetBody>;
