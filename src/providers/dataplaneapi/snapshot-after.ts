import type { RawServer } from '../../haproxy/model.js';
import type { Snapshot } from './mapping.js';
import { clone, newServer, type Tagging, type WritePlan } from './objects.js';

/**
 * The configuration as the API holds it once `work` has been applied to `snapshot`, at `version`: the objects
 * exactly as they were sent. A pass after the service's own commit then needs no new read of both lists,
 * which costs what the API's parse of the whole file costs. Only valid when nobody else wrote meanwhile
 * (the caller checks that the version moved by exactly the service's own writes). Pure.
 */
export function snapshotAfter(snapshot: Snapshot, work: WritePlan, version: number): Snapshot {
  const frontends = new Map(snapshot.frontends.map((f) => [f.name, f]));
  const backends = new Map(snapshot.backends.map((b) => [b.name, b]));
  const must = <T>(items: Map<string, T>, name: string, what: string): T => {
    const item = items.get(name);
    if (!item) throw new Error(`${what} ${name} is not in the snapshot`);
    return item;
  };
  if (work.kind === 'runtime') {
    for (const u of work.updates) {
      const b = must(backends, u.backend, 'backend');
      const servers = Object.fromEntries(
        Object.entries(b.servers ?? {}).map(([key, s]) => [key, s.name === u.server ? clone(u.body) : s]),
      );
      backends.set(u.backend, { ...b, servers });
    }
  } else if (work.kind === 'transaction') {
    for (const w of work.writes) {
      switch (w.kind) {
        case 'create_backend':
          backends.set(w.body.name, clone(w.body));
          break;
        case 'replace_backend':
          must(backends, w.name, 'backend');
          backends.set(w.name, clone(w.body));
          break;
        case 'delete_backend':
          backends.delete(w.name);
          break;
        case 'create_frontend':
          frontends.set(w.body.name, clone(w.body));
          break;
        case 'replace_frontend':
          must(frontends, w.name, 'frontend');
          frontends.set(w.name, clone(w.body));
          break;
        case 'replace_rules':
          frontends.set(w.frontend, {
            ...must(frontends, w.frontend, 'frontend'),
            backend_switching_rule_list: clone(w.body),
          });
          break;
        case 'delete_frontend':
          frontends.delete(w.name);
          break;
      }
    }
  }
  return { version, frontends: [...frontends.values()], backends: [...backends.values()] };
}

/**
 * `snapshot` at `version` once a write of ours has given the backends named in `servers` exactly those
 * servers (persistence of runtime servers): a server as read is kept when its endpoint is unchanged. Pure.
 */
export function withServersSent(
  snapshot: Snapshot,
  version: number,
  servers: ReadonlyMap<string, RawServer[]>,
  t: Tagging,
): Snapshot {
  const backends = snapshot.backends.map((b) => {
    const list = servers.get(b.name);
    if (!list) return b;
    const kept = new Map(Object.values(b.servers ?? {}).map((s) => [s.name, s]));
    const objects = list.map((s) => {
      const was = kept.get(s.name);
      return was && was.address === s.address && was.port === s.port ? was : newServer(s, t);
    });
    return { ...b, servers: Object.fromEntries(objects.map((s) => [s.name, s])) };
  });
  return { version, frontends: snapshot.frontends, backends };
}
