import { type DataplaneClient, versionOf } from './client.js';
import type { ServerUpdate } from './objects.js';
import type { Applied, Counter } from './options.js';
import type { Reloads } from './reload.js';

/**
 * Server address/port changes, each applied by the API through HAProxy's runtime API: no reload. One request
 * per server, with no undo: when one fails, the moves before it stay applied and the rest are not sent (the
 * error makes the loop read and plan again, which finishes the move).
 */
export async function applyRuntime(
  client: DataplaneClient,
  reloads: Reloads,
  updates: ServerUpdate[],
  version: number,
  signal: AbortSignal,
  counter: Counter,
): Promise<Applied> {
  let reloaded = false;
  let current = version;
  // Known only while every answer says which version it left.
  let known = true;
  for (const u of updates) {
    signal.throwIfAborted();
    counter.requests++;
    const res = await client.PUT('/services/haproxy/configuration/backends/{parent_name}/servers/{name}', {
      params: { path: { parent_name: u.backend, name: u.server }, query: { version: current } },
      body: u.body,
      signal,
    });
    const next = versionOf(res.headers);
    if (next === undefined) known = false;
    current = next ?? current + 1;
    if (res.status === 202) {
      // The API could not apply it at runtime and asked for a reload.
      reloaded = true;
      await reloads.follow(res.headers['reload-id'], counter);
    }
  }
  return {
    reload: reloaded ? 'succeeded' : 'none',
    version: known ? current : undefined,
    versionBumps: updates.length,
  };
}
