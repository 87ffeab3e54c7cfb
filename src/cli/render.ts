import { readFile } from 'node:fs/promises';
import { z } from 'zod';
import { ConfigError, loadRenderConfig } from '../config/env.js';
import type { HaproxyState } from '../haproxy/model.js';
import { renderDesired } from '../haproxy/render.js';
import { formatPlan } from '../plan/format.js';
import { plan } from '../plan/plan.js';
import { routeBackends } from '../reconcile/routing.js';
import { resolveRoutes } from '../routes/route.js';
import { type Output, routeSection } from './output.js';

// The file is untrusted input like any webhook body: its shape is checked before anything reads it.
const ClaimsFile = z
  .object({
    clusters: z.array(
      z
        .object({
          cluster: z.string(),
          host: z.string(),
          endpoints: z.array(z.object({ address: z.string(), port: z.number() }).strict()),
          /** Checked with the routes' own rules: a bad list rejects the cluster, as a bad host does. */
          authorized_networks: z.array(z.string()).nullable().optional(),
        })
        .strict(),
    ),
  })
  .strict();

/**
 * `render <file>`: validates clusters given with their endpoints and prints, as a dry run, what the service
 * would create in an HAProxy that holds none of its objects yet. Needs no secret and reaches nothing.
 */
export async function renderCommand(file: string, env: NodeJS.ProcessEnv, io: Output): Promise<number> {
  let settings: ReturnType<typeof loadRenderConfig>;
  try {
    settings = loadRenderConfig(env);
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    io.err(`render: ${err.message}`);
    return 1;
  }
  const json = await readJson(file, io);
  if (json === undefined) return 1;
  const parsed = ClaimsFile.safeParse(json);
  if (!parsed.success) {
    for (const issue of parsed.error.issues) io.err(`${file}: ${issue.path.join('.')}: ${issue.message}`);
    return 1;
  }
  const resolved = resolveRoutes(
    parsed.data.clusters.map(({ authorized_networks, ...c }, i) => ({
      ...c,
      claimedAt: i,
      networks: authorized_networks ?? [],
    })),
  );
  for (const r of resolved.routes) {
    const state = resolved.degraded.includes(r.cluster) ? 'degraded (no endpoints)' : 'accepted';
    io.out(`cluster ${r.cluster}: ${state} -> https://${r.host}:${settings.publicPort}`);
    io.out(`  authorized networks: ${r.networks.length > 0 ? r.networks.join(', ') : 'open to all'}`);
  }
  for (const r of resolved.rejected) io.out(`cluster ${r.cluster}: rejected: ${r.reason} (${r.detail})`);
  const desired = renderDesired(resolved.routes, settings.render);
  const empty: HaproxyState = { frontends: [], backends: [] };
  io.out('');
  io.out('plan against an HAProxy with none of our objects:');
  const p = plan(desired, empty);
  io.out(formatPlan(p));
  for (const line of routeSection(routeBackends(desired, p).values())) io.out(line);
  return 0;
}

/** A JSON file's content, or undefined after naming why it could not be had. */
export async function readJson(file: string, io: Output): Promise<unknown> {
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (err) {
    io.err(`${file}: cannot read: ${(err as Error).message}`);
    return undefined;
  }
  try {
    return JSON.parse(text);
  } catch (err) {
    io.err(`${file}: not JSON: ${(err as Error).message}`);
    return undefined;
  }
}
