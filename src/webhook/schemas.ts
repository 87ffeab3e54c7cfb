import { z } from 'zod';

const DNS_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
// IANA_SVC_NAME, as Kubernetes checks port names: at least one letter (a Service port named "80" cannot
// exist, so the cluster would stay degraded) and no "--".
const PORT_NAME = /^(?=[-a-z0-9]*[a-z])(?!.*--)[a-z0-9](?:[-a-z0-9]*[a-z0-9])?$/;

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
