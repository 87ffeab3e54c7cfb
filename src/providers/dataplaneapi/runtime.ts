import { ALLOW_VALUE, isAllowNetwork } from '../../haproxy/allow-keys.js';
import { DENIED, DENY_VALUE, type SlotMapOp } from '../../haproxy/slot-allow.js';
import type { RuntimeOp } from '../runtime-steps.js';
import { checkedHost, checkedName, checkedPort, checkedServerAddress } from './checked.js';
import type { DataplaneClient } from './client.js';
import { DataplaneHttpError } from './client.js';
import { storageName } from './map-names.js';
import type { Counter } from './reload.js';

/**
 * The runtime path: servers of slot backends and SNI map entries changed through HAProxy's runtime API
 * (`/services/haproxy/runtime/...`), no configuration write, no reload. Steps run in plan order (a new
 * route's servers before its map entry; a deleted route's entry before its servers; steps of one kind side by
 * side), one to four requests each (`runtimeRequests`), with no undo: when one fails, what ran stays, and the loop reads and plans again.
 * Map entries are sent without `force_sync` (with it the API compares the whole running map with its file on
 * every entry: O(N) per change); the map files and the servers are written soon after, batched
 * (`persist.ts`). A new server takes two requests (`add server`, then ready): HAProxy 3.0 refuses `enabled` on
 * a dynamic server. Map payloads (`PUT /runtime/maps/{name}`) are not used: v3.2.15 answered 201 to two
 * entries and ran only the first. An endpoint move is a delete and an add of the same server (runtime
 * servers have no address change of their own); one whose server carries a stream cannot be deleted, and is
 * moved in place by the file path instead (`busy`).
 */

/**
 * Sends `ops` in order; answers the servers (`backend/server`) left draining (not deleted yet), and the moved servers
 * (`backend/server`) that carry a stream: HAProxy refuses to delete them and the API cannot cut the stream, so
 * each is put back in service at its old address for the configuration's path to move in place.
 */
export async function applyRuntimeOps(
  client: DataplaneClient,
  ops: readonly RuntimeOp[],
  signal: AbortSignal,
  counter: Counter,
  /** Each allow-map key's changes of its slot's own map (`SlotAllowIndex.runtimeSteps`). */
  slotSteps: ReadonlyMap<RuntimeOp, readonly SlotMapOp[]> = new Map(),
): Promise<{ draining: string[]; busy: string[] }> {
  const draining: string[] = [];
  const busy: string[] = [];
  const one = async (op: RuntimeOp): Promise<void> => {
    switch (op.kind) {
      case 'create_server':
        await addServer(client, op.backend, op.server, signal, counter);
        break;
      case 'update_server':
        // Runtime servers have no endpoint change of their own: the old one goes, the new one comes.
        if (await removeServer(client, op.backend, op.server.name, signal, counter)) {
          await setAdminState(client, op.backend, op.server.name, 'ready', signal, counter);
          busy.push(`${op.backend}/${op.server.name}`);
        } else await addServer(client, op.backend, op.server, signal, counter);
        break;
      case 'delete_server':
        if (await removeServer(client, op.backend, op.server.name, signal, counter))
          draining.push(`${op.backend}/${op.server.name}`);
        break;
      case 'set_map_entry':
        await setEntry(client, op, signal, counter);
        break;
      case 'delete_map_entry':
        counter.requests++;
        await client.DELETE('/services/haproxy/runtime/maps/{parent_name}/entries/{id}', {
          params: {
            path: { parent_name: storageName(op.map), id: checkedHost(op.host) },
          },
          signal,
        });
        break;
      case 'add_allow_entry':
      case 'delete_allow_entry':
        // In their order: a slot's networks are added before the ones its change removes.
        for (const m of slotSteps.get(op) ?? []) await slotMapEntry(client, m, signal, counter);
        break;
    }
  };
  // The plan comes sorted (`sortOperations`): every server of a new route before any map entry, entries
  // removed before their servers, the allow map's stages around the SNI map's changes. Operations of one
  // kind and stage touch distinct servers, hosts or keys, so such a run goes side by side (a burst of new
  // routes is bound by round trips, not by the API), and the next starts only once the run before has ended.
  for (const run of runsOfOneKind(ops)) await inParallel(run, PARALLEL, signal, one);
  return { draining, busy };
}

/** Requests in flight at once: the client's sockets (`client.ts`). */
const PARALLEL = 4;

/** `ops` cut where the kind (or the allow map's stage) changes, order kept. */
function runsOfOneKind(ops: readonly RuntimeOp[]): RuntimeOp[][] {
  const runs: RuntimeOp[][] = [];
  const step = (op: RuntimeOp) => ('stage' in op ? `${op.kind}/${op.stage}` : op.kind);
  for (const op of ops) {
    const last = runs.at(-1);
    const first = last?.[0];
    if (last && first && step(first) === step(op)) last.push(op);
    else runs.push([op]);
  }
  return runs;
}

/**
 * A network of a slot's own allow map (`slot-allow.ts`), added or removed: `POST …/entries`,
 * `DELETE …/entries/{network}` (URL-encoded: `198.18.0.0%2F15`, taken as it is by v3.0.23, v3.2.15 and
 * v3.4.0). Entries are never replaced (a `PUT` of a key with a `/` applies, then answers 404: the API reads
 * the entry back with `get map`, which looks a network up as an address).
 */
async function slotMapEntry(
  client: DataplaneClient,
  op: SlotMapOp,
  signal: AbortSignal,
  counter: Counter,
): Promise<void> {
  const known =
    (isAllowNetwork(op.network) && op.value === ALLOW_VALUE) ||
    (DENIED.includes(op.network) && op.value === DENY_VALUE);
  if (!/^[\x21-\x7e]{1,64}$/.test(op.network) || (op.kind === 'add' && !known))
    throw new RangeError(`refusing to send the network ${JSON.stringify(op.network)}`);
  const parent_name = storageName(op.map);
  counter.requests++;
  if (op.kind === 'add')
    await client.POST('/services/haproxy/runtime/maps/{parent_name}/entries', {
      params: { path: { parent_name } },
      body: { key: op.network, value: op.value },
      signal,
    });
  else
    await client.DELETE('/services/haproxy/runtime/maps/{parent_name}/entries/{id}', {
      params: { path: { parent_name, id: op.network } },
      signal,
    });
}

/**
 * `work` on every item, at most `limit` at a time. After a failure nothing more starts; what is under way
 * ends, then the first failure is thrown (what ran stays: the loop reads and plans again).
 */
async function inParallel<T>(
  items: readonly T[],
  limit: number,
  signal: AbortSignal,
  work: (item: T) => Promise<void>,
): Promise<void> {
  let next = 0;
  let failure: { err: unknown } | undefined;
  const lane = async () => {
    while (!failure && next < items.length) {
      const item = items[next++] as T;
      try {
        signal.throwIfAborted();
        await work(item);
      } catch (err) {
        failure ??= { err };
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, lane));
  if (failure) throw failure.err;
}

async function setEntry(
  client: DataplaneClient,
  op: Extract<RuntimeOp, { kind: 'set_map_entry' }>,
  signal: AbortSignal,
  counter: Counter,
): Promise<void> {
  const parent_name = storageName(op.map);
  const key = checkedHost(op.host);
  const value = checkedName(op.backend, 'backend');
  counter.requests++;
  if (op.previous === null) {
    await client.POST('/services/haproxy/runtime/maps/{parent_name}/entries', {
      params: { path: { parent_name } },
      body: { key, value },
      signal,
    });
    return;
  }
  await client.PUT('/services/haproxy/runtime/maps/{parent_name}/entries/{id}', {
    params: { path: { parent_name, id: key } },
    body: { value },
    signal,
  });
}

/** `add server` then `enable server`: HAProxy creates a runtime server in maintenance. */
async function addServer(
  client: DataplaneClient,
  backend: string,
  s: { name: string; address: string; port: number; check: boolean },
  signal: AbortSignal,
  counter: Counter,
): Promise<void> {
  const path = { parent_name: checkedName(backend, 'backend') };
  const name = checkedName(s.name, 'server');
  counter.requests++;
  await client.POST('/services/haproxy/runtime/backends/{parent_name}/servers', {
    params: { path },
    body: {
      name,
      address: checkedServerAddress(s.address),
      port: checkedPort(s.port, 'server'),
      ...(s.check ? { check: 'enabled' as const } : {}),
    },
    signal,
  });
  await setAdminState(client, backend, name, 'ready', signal, counter);
}

async function setAdminState(
  client: DataplaneClient,
  backend: string,
  server: string,
  state: 'ready' | 'maint',
  signal: AbortSignal,
  counter: Counter,
): Promise<void> {
  const path = { parent_name: checkedName(backend, 'backend'), name: checkedName(server, 'server') };
  counter.requests++;
  await client.PUT('/services/haproxy/runtime/backends/{parent_name}/servers/{name}', {
    params: { path },
    body: { admin_state: state },
    signal,
  });
}

/**
 * Maintenance first (no new connections), then `del server`; a server already gone is removed. HAProxy
 * refuses to delete a server that still has connections (a watch held open), and the API offers no
 * `shutdown sessions`: such a server is left draining in maintenance (its route is already closed to new
 * connections, the file no longer has it) and the next pass deletes it once its streams have closed.
 */
async function removeServer(
  client: DataplaneClient,
  backend: string,
  server: string,
  signal: AbortSignal,
  counter: Counter,
): Promise<boolean> {
  const path = { parent_name: checkedName(backend, 'backend'), name: checkedName(server, 'server') };
  try {
    await setAdminState(client, backend, server, 'maint', signal, counter);
  } catch (err) {
    if (err instanceof DataplaneHttpError && err.status === 404) return false;
    throw err;
  }
  counter.requests++;
  try {
    await client.DELETE('/services/haproxy/runtime/backends/{parent_name}/servers/{name}', {
      params: { path },
      signal,
    });
  } catch (err) {
    if (err instanceof DataplaneHttpError && /still has connections/i.test(err.apiMessage)) return true;
    throw err;
  }
  return false;
}
