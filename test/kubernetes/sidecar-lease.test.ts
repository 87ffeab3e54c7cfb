import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CoreV1Api, CustomObjectsApi } from '@kubernetes/client-node';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config/env.js';
import { MemoryProvider } from '../../src/providers/memory/memory-provider.js';
import { type Service, startService } from '../../src/service.js';
import {
  applyChartRbac,
  applyClusterRouteCrd,
  type KubeApiserver,
  startKubeApiserver,
} from '../support/kube-apiserver.js';
import { freeLoopbackPort } from '../support/ports.js';
import { waitFor } from '../support/wait.js';
import { signedClient } from '../support/webhook-client.js';

// The chart's sidecar shape, as the composition root wires it (KUBEBYON_APPLY=always): two replicas on a
// real kube-apiserver, each with an HAProxy of its own (a memory provider). Each applies every change to its
// own HAProxy whether or not it holds the Lease; only the holder publishes ClusterRoute status, and when it
// goes, the other takes the Lease and publishes.
const NS = 'kubebyon-system';
const SECRET = 'sidecar-lease-test-secret';
const LEASE = { KUBEBYON_LEASE_DURATION_MS: '3000', KUBEBYON_LEASE_RENEW_DEADLINE_MS: '2000' };
const base = { group: 'kubebyon.io', version: 'v1alpha1', namespace: NS, plural: 'clusterroutes' };

describe('sidecar shape: every replica applies, the Lease holder publishes', () => {
  let kube: KubeApiserver;
  let dir: string;
  let kubeconfig: string;
  const replicas = new Map<string, { service: Service; haproxy: MemoryProvider }>();

  const start = async (id: string) => {
    const haproxy = new MemoryProvider();
    mkdirSync(join(dir, id), { recursive: true });
    const env = {
      KUBEBYON_PROVIDER: 'memory',
      KUBEBYON_LISTEN_ADDR: `127.0.0.1:${await freeLoopbackPort()}`,
      KUBEBYON_STATE_FILE: join(dir, id, 'clusters.json'),
      KUBEBYON_WEBHOOK_SECRET: SECRET,
      KUBEBYON_STATIC_NODE_ADDRESSES: '198.18.0.1',
      KUBEBYON_STATE_STORE: 'kubernetes',
      KUBEBYON_KUBERNETES_NAMESPACE: NS,
      KUBEBYON_LEADER_ELECTION_ID: id,
      KUBEBYON_LEASE_RETRY_PERIOD_MS: '250',
      ...LEASE,
      KUBEBYON_APPLY: 'always',
      KUBEBYON_RESYNC_INTERVAL_MS: '0',
      KUBECONFIG: kubeconfig,
    };
    const service = await startService(loadConfig(env), {
      logger: pino({ level: 'silent' }),
      env,
      provider: haproxy,
    });
    replicas.set(id, { service, haproxy });
    return service;
  };
  /** Whether this replica's HAProxy routes `host` (an entry of its SNI map). */
  const routed = (haproxy: MemoryProvider, host: string) =>
    (haproxy.state.maps ?? []).some((m) => m.entries.has(host));
  const published = async (name: string) =>
    (
      (await kube.admin.makeApiClient(CustomObjectsApi).getNamespacedCustomObject({ ...base, name })) as {
        spec: { updatedAt: number };
        status?: { state?: string; observedUpdatedAt?: number };
      }
    ).status;
  const put = (service: Service, name: string) =>
    signedClient(service.url, SECRET).request('PUT', `/v1/clusters/${name}?wait=true`, {
      control_plane_host: `api.${name}.example.com`,
      public_access_mode: 'loadbalancer',
      node_port: 30443,
    });

  beforeAll(async () => {
    kube = await startKubeApiserver();
    await kube.admin.makeApiClient(CoreV1Api).createNamespace({ body: { metadata: { name: NS } } });
    await applyClusterRouteCrd(kube);
    await applyChartRbac(kube);
    dir = mkdtempSync(join(tmpdir(), 'kubebyon-sidecar-lease-'));
    kubeconfig = join(dir, 'kubeconfig');
    writeFileSync(kubeconfig, kube.adapter.exportConfig());
    await start('r0');
    await start('r1');
  }, 300_000);
  afterAll(async () => {
    for (const { service } of replicas.values()) await service.stop();
    await kube?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('applies a change on every replica, and one of them publishes its status', async () => {
    const all = [...replicas.values()];
    await waitFor(
      () => all.filter((r) => r.service.fleet.isPublishing).length === 1,
      15_000,
      'a Lease holder',
    );
    const standby = all.find((r) => !r.service.fleet.isPublishing);
    if (!standby) throw new Error('no standby');
    // Sent to the replica that does not hold the Lease: it applies it to its own HAProxy and answers.
    const answer = await put(standby.service, 'demo');
    expect(answer.status).toBe(200);
    expect(answer.body.state).toBe('applied');
    expect(routed(standby.haproxy, 'api.demo.example.com')).toBe(true);
    // The other replica applies it too, from its informer.
    for (const r of all)
      await waitFor(() => routed(r.haproxy, 'api.demo.example.com'), 15_000, 'every HAProxy to route it');
    const status = await waitFor(() => published('demo'), 15_000, 'the status to be published', {
      ok: (s) => s?.state === 'applied',
    });
    expect(status?.observedUpdatedAt).toBe(standby.service.store.get('demo')?.updatedAt);
    // Both replicas plan against their own HAProxy (a central standby would answer 503 not_leader).
    for (const r of all)
      expect((await signedClient(r.service.url, SECRET).request('GET', '/v1/plan')).status).toBe(200);
  });

  it('hands publishing to the other replica when the holder stops, which keeps applying meanwhile', async () => {
    const [leaderId, leader] = [...replicas].find(([, r]) => r.service.fleet.isPublishing) ?? [];
    const [, other] = [...replicas].find(([, r]) => !r.service.fleet.isPublishing) ?? [];
    if (!leader || !other || !leaderId) throw new Error('no leader and standby');
    await leader.service.stop();
    replicas.delete(leaderId);
    await waitFor(() => other.service.fleet.isPublishing, 15_000, 'the other replica to take the Lease');
    const answer = await put(other.service, 'after');
    expect(answer.status).toBe(200);
    expect(routed(other.haproxy, 'api.after.example.com')).toBe(true);
    expect(routed(leader.haproxy, 'api.after.example.com')).toBe(false);
    await waitFor(() => published('after'), 15_000, 'the new holder to publish', {
      ok: (s) => s?.state === 'applied',
    });
  });
});
