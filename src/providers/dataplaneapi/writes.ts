import type { Owner } from '../../haproxy/model.js';
import type { Plan } from '../../plan/plan.js';
import type { TagStore } from './capability.js';
import {
  type ApiBackend,
  backendTagsOf,
  checkedPort,
  checkedServerAddress,
  type Snapshot,
} from './mapping.js';
import { clone, existing, type ServerUpdate, type Write, type WritePlan } from './objects.js';
import {
  type BackendWork,
  backendWrite,
  type FrontendWork,
  frontendWrite,
  type SectionContext,
} from './sections.js';
import { tagWriter } from './tags.js';

/**
 * Turns a plan into the fewest Data Plane API writes, from the objects of the last read (pure, no I/O):
 * - a plan of address/port changes only, small enough, goes through the runtime path (no transaction, no
 *   reload): one server replace per change;
 * - anything else is one transaction: one request per backend touched (a new backend with its servers is one
 *   `full_section` POST; a changed one one `full_section` PUT of the object as read, changed), one for the
 *   frontend's switching rules (replace-all) or the whole frontend when its settings change, one per deletion.
 * Objects are changed from their raw form as read (`sections.ts`); what is built new is built by `objects.ts`.
 */
export interface WriteOptions {
  /** Most server updates sent one by one through the runtime path; more go into one transaction. */
  runtimeMaxServers: number;
  /** Whose tags what is written carries, and which parts of our frontend (bind, tcp rules) are ours. */
  owner: Owner;
  /** Where the API version keeps tags (`capability.ts`). */
  tags: TagStore;
  /** The path of each SNI map the plan's frontend writes name, in the API's storage. */
  mapFile?: (name: string) => string;
}

/** A plan of server address/port changes only, each to a server of ours as read: the runtime path's case. */
function runtimeUpdates(plan: Plan, backends: Map<string, ApiBackend>): ServerUpdate[] | undefined {
  const updates: ServerUpdate[] = [];
  for (const op of plan.operations) {
    if (op.kind !== 'update_server') return undefined;
    const backend = existing(backends, op.backend, 'backend');
    const servers = new Map(Object.values(backend.servers ?? {}).map((s) => [s.name, s]));
    const current = existing(servers, op.server.name, `server ${op.backend}/`);
    if ((current.check === 'enabled') !== op.server.check) return undefined;
    // Exactly the server as read but for address and port: the API applies that without a reload.
    updates.push({
      backend: op.backend,
      server: op.server.name,
      body: {
        ...clone(current),
        address: checkedServerAddress(op.server.address),
        port: checkedPort(op.server.port, 'server'),
      },
    });
  }
  return updates;
}

export function planWrites(plan: Plan, snapshot: Snapshot, options: WriteOptions): WritePlan {
  if (plan.operations.length === 0) return { kind: 'none' };
  const backends = new Map(snapshot.backends.map((b) => [b.name, b]));
  const frontends = new Map(snapshot.frontends.map((f) => [f.name, f]));

  const context: SectionContext = {
    owner: options.owner,
    writer: tagWriter(options.tags),
    backendTags: backendTagsOf(snapshot.backends),
    ...(options.mapFile ? { mapFile: options.mapFile } : {}),
  };
  const runtime = runtimeUpdates(plan, backends);
  if (runtime && runtime.length <= options.runtimeMaxServers) return { kind: 'runtime', updates: runtime };

  const perBackend = new Map<string, BackendWork>();
  const work = (name: string): BackendWork => {
    let w = perBackend.get(name);
    if (!w) {
      w = { creates: [], updates: [], deletes: [] };
      perBackend.set(name, w);
    }
    return w;
  };
  const frontendOps = new Map<string, FrontendWork>();
  const frontendWork = (name: string) => {
    let w = frontendOps.get(name);
    if (!w) {
      w = {};
      frontendOps.set(name, w);
    }
    return w;
  };
  const deleteFrontends: string[] = [];
  const deleteBackends: string[] = [];

  for (const op of plan.operations) {
    switch (op.kind) {
      case 'create_backend':
        work(op.backend.name).create = op.backend;
        break;
      case 'update_backend':
        work(op.backend.name).update = op.backend;
        break;
      case 'create_server':
        work(op.backend).creates.push(op);
        break;
      case 'update_server':
        work(op.backend).updates.push(op);
        break;
      case 'delete_server':
        work(op.backend).deletes.push(op);
        break;
      case 'create_frontend':
        frontendWork(op.frontend.name).create = op;
        break;
      case 'update_frontend':
        frontendWork(op.frontend.name).update = op;
        break;
      case 'set_switching_rules':
        frontendWork(op.frontend).rules = op;
        break;
      case 'delete_frontend':
        deleteFrontends.push(op.name);
        break;
      case 'delete_backend':
        deleteBackends.push(op.name);
        break;
    }
  }

  const writes: Write[] = [];
  // Backends first: the rules written next point at them.
  for (const [name, w] of perBackend) writes.push(backendWrite(name, w, backends, context));
  for (const [name, w] of frontendOps) writes.push(frontendWrite(name, w, frontends, context));
  for (const name of deleteFrontends) {
    existing(frontends, name, 'frontend');
    writes.push({ kind: 'delete_frontend', name });
  }
  for (const name of deleteBackends) {
    existing(backends, name, 'backend');
    writes.push({ kind: 'delete_backend', name });
  }
  return runtime ? { kind: 'transaction', writes, moves: runtime } : { kind: 'transaction', writes };
}
