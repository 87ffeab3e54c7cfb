import { readSecret } from '../config/env.js';
import type { ClusterStatus } from '../reconcile/status.js';
import { sign } from '../webhook/auth.js';
import { clusterTable, type Output, routeSection, routesOf } from './output.js';

export type { Output } from './output.js';

/**
 * `status`: every cluster of a running service with its state, then host -> backend -> servers, as tables
 * (or JSON with --json).
 */
export async function statusCommand(
  opts: { json: boolean },
  env: NodeJS.ProcessEnv,
  io: Output,
): Promise<number> {
  const base = (env.KUBEBYON_ADAPTER_URL ?? 'http://127.0.0.1:8080').replace(/\/$/, '');
  const { value: secret, problem } = readSecret(env, 'KUBEBYON_WEBHOOK_SECRET');
  if (problem || !secret) {
    io.err(
      `status: ${problem ?? 'set KUBEBYON_WEBHOOK_SECRET or KUBEBYON_WEBHOOK_SECRET_FILE (the API is signed)'}`,
    );
    return 1;
  }
  const path = '/v1/clusters';
  const timestamp = String(Math.floor(Date.now() / 1000));
  let res: Response;
  try {
    res = await fetch(`${base}${path}`, {
      headers: {
        'x-kubebyon-timestamp': timestamp,
        'x-kubebyon-signature': sign(secret, timestamp, 'GET', path, Buffer.alloc(0)),
      },
      signal: AbortSignal.timeout(10_000),
    });
  } catch (err) {
    io.err(`status: cannot reach ${base}: ${err instanceof Error ? err.message : String(err)}`);
    return 1;
  }
  if (!res.ok) {
    io.err(`status: ${base}${path} answered ${res.status}: ${await res.text()}`);
    return 1;
  }
  const { clusters } = (await res.json()) as { clusters: ClusterStatus[] };
  if (opts.json) io.out(JSON.stringify(clusters, null, 2));
  else {
    for (const line of [...clusterTable(clusters), ...routeSection(routesOf(clusters))]) io.out(line);
  }
  return 0;
}
