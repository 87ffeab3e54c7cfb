import { readFileSync } from 'node:fs';
import { z } from 'zod';
import { parseBindAddr } from '../config/bind.js';
import type { HaproxyState } from '../haproxy/model.js';
import { DEFAULT_RENDER_OPTIONS, renderDesired } from '../haproxy/render.js';
import { formatPlan } from '../plan/format.js';
import { plan } from '../plan/plan.js';
import { resolveRoutes } from '../routes/route.js';

// The file is untrusted input like any webhook body: its shape is checked before anything reads it.
const ClaimsFile = z.object({
  clusters: z.array(
    z.object({
      cluster: z.string(),
      host: z.string(),
      endpoints: z.array(z.object({ address: z.string(), port: z.number() })),
    }),
  ),
});

/**
 * `render <file>`: validates a set of clusters and prints, as a dry run, what the service would create in an
 * HAProxy that holds none of its objects yet. Reads and writes nothing else.
 */
export function renderCommand(file: string, env: NodeJS.ProcessEnv): number {
  const parsed = ClaimsFile.safeParse(JSON.parse(readFileSync(file, 'utf8')));
  if (!parsed.success) {
    for (const issue of parsed.error.issues)
      console.error(`${file}: ${issue.path.join('.')}: ${issue.message}`);
    return 1;
  }
  const bind = parseBindAddr(env.KUBEBYON_HAPROXY_BIND_ADDR ?? ':443');
  if (!bind.ok) {
    console.error(`KUBEBYON_HAPROXY_BIND_ADDR: ${bind.detail}`);
    return 1;
  }
  const resolved = resolveRoutes(parsed.data.clusters.map((c, i) => ({ ...c, claimedAt: i })));
  for (const r of resolved.routes) {
    const state = resolved.degraded.includes(r.cluster) ? 'degraded (no endpoints)' : 'accepted';
    console.log(`cluster ${r.cluster}: ${state} -> https://${r.host}:${bind.bind.port}`);
  }
  for (const r of resolved.rejected) console.log(`cluster ${r.cluster}: rejected: ${r.reason} (${r.detail})`);
  const desired = renderDesired(resolved.routes, { ...DEFAULT_RENDER_OPTIONS, bind: bind.bind });
  const empty: HaproxyState = { frontends: [], backends: [] };
  console.log('\nplan against an HAProxy with none of our objects:');
  console.log(formatPlan(plan(desired, empty)));
  return 0;
}
