import type { CoordinationV1Api } from '@kubernetes/client-node';
import type { ServiceProcess } from './service-process.js';
import { waitFor } from './wait.js';

/** The Lease the replicas elect their leader on (the service's default name). */
const LEASE = 'kubebyon-haproxy-adapter';

/** A replica as tests hold it: its id (the Lease's holder identity) and its process. */
export interface Replica {
  id: string;
  replica: ServiceProcess;
}

/**
 * Replicas led by a Lease in `ns`, as tests look at them: who holds the Lease, whether a replica says it leads,
 * the leader once both agree, and a kill -9 of it. `leases` is a getter: the client exists only once the
 * test's kube-apiserver is up. `replicas` (id -> process) loses the replica a kill removes.
 */
export function leaseReplicas(
  leases: () => CoordinationV1Api,
  ns: string,
  replicas: Map<string, ServiceProcess>,
) {
  const holder = async () =>
    (await leases().readNamespacedLease({ name: LEASE, namespace: ns })).spec?.holderIdentity;
  const leading = async (r: ServiceProcess) =>
    /^kubebyon_haproxy_adapter_leader 1$/m.test(await (await fetch(`${r.url}/metrics`)).text());
  const leaderOf = async (id: string | undefined, what: string): Promise<Replica> => {
    const replica = replicas.get(id ?? '') as ServiceProcess;
    await waitFor(() => leading(replica), 10_000, `${what} to lead`);
    return { id: id ?? '', replica };
  };
  return {
    holder,
    leading,
    /** The replica that holds the Lease, once it also says it leads. */
    async leader(): Promise<Replica> {
      const id = await waitFor(holder, 30_000, 'a leader', { ok: (h) => !!h && replicas.has(h) });
      return leaderOf(id, 'the leader');
    },
    /** SIGKILLs `leader`'s process (and forgets it); no wait. */
    async kill(leader: Replica): Promise<void> {
      await leader.replica.kill9();
      replicas.delete(leader.id);
    },
    /** The replica that takes the Lease from `from` and leads. */
    async next(from: Replica): Promise<Replica> {
      const id = await waitFor(holder, 30_000, 'a new leader', { ok: (h) => !!h && h !== from.id });
      return leaderOf(id, 'the new leader');
    },
  };
}
