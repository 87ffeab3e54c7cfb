import { z } from 'zod';

/** Where a cluster's NodePort comes from: a Service on the host cluster, or a fixed port from the webhook. */
export const ClusterTarget = z.union([
  z.object({
    service: z.object({
      namespace: z.string(),
      name: z.string(),
      port: z.union([z.number().int(), z.string()]),
    }),
  }),
  z.object({ nodePort: z.number().int() }),
]);
export type ClusterTarget = z.infer<typeof ClusterTarget>;

/** One accepted cluster, as kubebyon-api described it. */
export const ClusterRecord = z.object({
  name: z.string(),
  host: z.string(),
  target: ClusterTarget,
  /**
   * Who may reach the cluster's API server: canonical CIDRs (`src/routes/networks.ts`), sorted. Absent or
   * empty: open to all.
   */
  authorizedNetworks: z.array(z.string()).optional(),
  /** When this cluster first asked for its current host: the older claim wins a contested host. */
  claimedAt: z.number(),
  updatedAt: z.number(),
});
export type ClusterRecord = z.infer<typeof ClusterRecord>;
