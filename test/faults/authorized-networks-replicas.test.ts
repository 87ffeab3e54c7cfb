import { setTimeout as sleep } from 'node:timers/promises';
import type { CoordinationV1Api } from '@kubernetes/client-node';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { aroundLoops, fireLoop } from '../support/fire-loop.js';
import { haproxyVersionUnderTest } from '../support/haproxy-testbed.js';
import {
  type KubeApiserver,
  prepareForReplicas,
  replicaSettings,
  startKubeApiserver,
} from '../support/kube-apiserver.js';
import { leaseReplicas } from '../support/lease-replicas.js';
import { type ServiceProcess, startServiceProcess } from '../support/service-process.js';
import { type NamedTlsServer, sniProbe, startNamedTlsServer } from '../support/tls.js';
import { waitFor } from '../support/wait.js';
import { describeFault, type FaultBed, faultProviderUnderTest, startFaultBed } from './harness.js';

const provider = faultProviderUnderTest();
const NS = 'kubebyon-system';
const HOST = 'api.listed.example.com';
/** The listed source, and one no list holds (127/8 is loopback on Linux). */
const INSIDE = '127.0.0.1';
const OUTSIDE = '127.0.0.2';

// Authorized networks with replicas, for the provider of the run (with the Data Plane API this is the chart's
// central shape: replicas sharing ClusterRoute objects, the Lease's holder driving the API): a list written to
// a standby reaches HAProxy through the leader; the leader is killed with both sources probing in a tight loop,
// and the replica that takes the Lease keeps the list and applies the next one.
describeFault(
  'provider',
  `authorized networks with three replicas led by a Lease, HAProxy ${haproxyVersionUnderTest()}, ${provider} provider`,
  () => {
    let bed: FaultBed;
    let kube: KubeApiserver;
    let alpha: NamedTlsServer;
    let leases: CoordinationV1Api;
    let kubeconfig: string;
    const replicas = new Map<string, ServiceProcess>();

    const elected = leaseReplicas(() => leases, NS, replicas);
    const from = (localAddress: string) => sniProbe(bed.sniPort, HOST, 5_000, { localAddress });
    const enforced = (inside: string, outside: string) =>
      waitFor(
        async () => 'reached' in (await from(inside)) && !('reached' in (await from(outside))),
        20_000,
        `${inside} let in, ${outside} closed`,
        { everyMs: 100 },
      );
    let n = 0;
    const put = (r: ServiceProcess, networks: string[]) =>
      r.client.request('PUT', `/v1/clusters/listed?wait=true&n=${n++}`, {
        control_plane_host: HOST,
        public_access_mode: 'loadbalancer',
        node_port: alpha.port,
        authorized_networks: networks,
      });

    beforeAll(async () => {
      alpha = await startNamedTlsServer('alpha');
      kube = await startKubeApiserver();
      bed = await startFaultBed({ provider });
      ({ kubeconfig, leases } = await prepareForReplicas(kube, NS, bed.stateDir));
      for (const id of ['r0', 'r1', 'r2']) {
        const env = bed.env({
          ...replicaSettings(id, bed.stateDir, kubeconfig, NS),
          // Tight loops from one source: the per-source rate limit would refuse them for another reason.
          KUBEBYON_HAPROXY_MAX_CONN_RATE_PER_SOURCE: '0',
        });
        replicas.set(
          id,
          await startServiceProcess(env, bed.secret, { until: 'readyz', startTimeoutMs: 60_000 }),
        );
      }
    }, 300_000);
    afterAll(async () => {
      await Promise.all([...replicas.values()].map((r) => r.stop()));
      await bed?.stop();
      await kube?.stop();
      await alpha?.close();
    });

    it('a list written to a standby is enforced, and kept by the next leader through a kill -9 of the leader', async () => {
      const leader = await elected.leader();
      const standby = [...replicas.entries()].find(([id]) => id !== leader.id)?.[1] as ServiceProcess;
      const set = await put(standby, [`${INSIDE}/32`]);
      expect(set.status).toBe(200);
      await enforced(INSIDE, OUTSIDE);
      const inside = fireLoop(() => from(INSIDE), { maxMs: 60_000 });
      const outside = fireLoop(() => from(OUTSIDE), { maxMs: 60_000 });
      let takeoverMs = 0;
      let second: string | undefined;
      const { i, o } = await aroundLoops(inside, outside, async () => {
        const killedAt = Date.now();
        await elected.kill(leader);
        const next = await elected.next(leader);
        second = next.id;
        takeoverMs = Date.now() - killedAt;
        // Its first pass reads HAProxy afresh and plans, with both loops still going.
        const plan = await waitFor(
          () => next.replica.client.request('GET', '/v1/plan'),
          15_000,
          'an empty plan',
          {
            ok: (p) => p.status === 200 && p.body.operations?.length === 0,
          },
        );
        expect(plan.body).toMatchObject({ operations: [] });
        await sleep(2_000);
      });
      console.log(
        `[measure] replicas (${provider}, HAProxy ${haproxyVersionUnderTest()}): leader ${leader.id} killed, ${second} leading ${takeoverMs} ms later; ${INSIDE}: ${i.reached} in, ${i.refused} refused ${JSON.stringify(i.why)}; ${OUTSIDE}: ${o.reached} in, ${o.refused} closed`,
      );
      expect(o.reached).toBe(0);
      expect(i.refused).toBe(0);
      expect(i.reached).toBeGreaterThanOrEqual(10);
      expect(o.refused).toBeGreaterThanOrEqual(10);
      // The next list, written to any replica left, is applied by the new leader.
      const left = [...replicas.values()];
      expect((await put(left[left.length - 1] as ServiceProcess, [`${OUTSIDE}/32`])).status).toBe(200);
      await enforced(OUTSIDE, INSIDE);
    }, 180_000);

    it('a narrowing acknowledged by a standby holds when the leader is killed the moment it is acknowledged', async () => {
      const leader = await elected.leader();
      const standby = [...replicas.entries()].find(([id]) => id !== leader.id)?.[1] as ServiceProcess;
      expect((await put(standby, ['127.0.0.0/30'])).status).toBe(200);
      await enforced(INSIDE, '127.0.0.5');
      await enforced(OUTSIDE, '127.0.0.5');
      // Narrowed to OUTSIDE alone; the leader SIGKILLed as soon as the standby says the change is applied.
      const removed = fireLoop(() => from(INSIDE), { maxMs: 60_000 });
      const kept = fireLoop(() => from(OUTSIDE), { maxMs: 60_000 });
      let second: string | undefined;
      try {
        expect((await put(standby, [`${OUTSIDE}/32`])).status).toBe(200);
        const removedBefore = removed.totals().reached;
        await elected.kill(leader);
        // Probes already under way when the answer came may have been judged by the old list.
        await Promise.all([removed.probesFromNow(1), kept.probesFromNow(1)]);
        const settled = removed.totals().reached;
        const next = await elected.next(leader);
        second = next.id;
        await waitFor(() => next.replica.client.request('GET', '/v1/plan'), 15_000, 'an empty plan', {
          ok: (p) => p.status === 200 && p.body.operations?.length === 0,
        });
        await sleep(2_000);
        await Promise.all([removed.probesFromNow(5), kept.probesFromNow(5)]);
        const r = removed.totals();
        const k = kept.totals();
        console.log(
          `[measure] replicas, narrowing then kill -9 of the leader ${leader.id} (${provider}, HAProxy ${haproxyVersionUnderTest()}): ${second} leads; removed ${INSIDE}: ${r.reached - settled} let in after the answer (${settled - removedBefore} while it arrived), ${r.refused} closed; kept ${OUTSIDE}: ${k.reached} in, ${k.refused} refused ${JSON.stringify(k.why)}`,
        );
        expect(r.reached - settled).toBe(0);
        expect(k.refused).toBe(0);
      } finally {
        await Promise.all([removed.stop(), kept.stop()]);
      }
    }, 180_000);
  },
);
