import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { CoreV1Api, KubernetesObjectApi, type V1Service } from '@kubernetes/client-node';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { chartRbac } from '../support/chart.js';
import { haproxyVersionUnderTest } from '../support/haproxy-testbed.js';
import { type KubeApiserver, startKubeApiserver } from '../support/kube-apiserver.js';
import { type ServiceProcess, startServiceProcess } from '../support/service-process.js';
import { sniProbe } from '../support/tls.js';
import { waitFor } from '../support/wait.js';
import {
  describeFault,
  metric,
  type PortTlsServer,
  readyz,
  type StockFaultBed,
  startFaultBed,
  startNodePortTlsServer,
} from './harness.js';

const OUTAGE_MS = 30_000;

function service(name: string, nodePort: number): V1Service {
  return {
    metadata: { name, namespace: 'vcluster-demo' },
    spec: {
      type: 'NodePort',
      selector: { app: name },
      ports: [{ name: 'https', port: 443, targetPort: 8443, protocol: 'TCP', nodePort }],
    },
  };
}

// kube-apiserver down for 30 s under KUBEBYON_TOPOLOGY=kubernetes: the service keeps the last known nodes
// and NodePorts (no route removed while it cannot see them), says so in readiness and metrics, and follows
// the cluster again once the API is back.
describeFault('stock', `kube-apiserver down for 30 s, HAProxy ${haproxyVersionUnderTest()}`, () => {
  let kube: KubeApiserver;
  let admin: CoreV1Api;
  let bed: StockFaultBed;
  let svc: ServiceProcess;
  const servers: Record<string, PortTlsServer> = {};
  let n = 0;

  const put = async (name: string, serviceName: string) => {
    const res = await svc.client.request('PUT', `/v1/clusters/${name}?n=${n++}`, {
      control_plane_host: `${name}.example.com`,
      public_access_mode: 'loadbalancer',
      service: { namespace: 'vcluster-demo', name: serviceName, port: 443 },
    });
    expect(res.status).toBe(202);
  };
  const reaches = (host: string, server: string, timeoutMs = 30_000) =>
    waitFor(() => sniProbe(bed.sniPort, host), timeoutMs, `${host} -> ${server}`, {
      ok: (r) => 'reached' in r && r.reached === server,
    });

  beforeAll(async () => {
    for (const name of ['a', 'b', 'c']) servers[name] = await startNodePortTlsServer(name);
    kube = await startKubeApiserver();
    admin = kube.admin.makeApiClient(CoreV1Api);
    await admin.createNamespace({ body: { metadata: { name: 'kubebyon-system' } } });
    await admin.createNamespace({ body: { metadata: { name: 'vcluster-demo' } } });
    const objects = kube.admin.makeApiClient(KubernetesObjectApi);
    for (const manifest of chartRbac()) await objects.create(manifest);
    await admin.createNode({ body: { metadata: { name: 'node-1' } } });
    const node = await admin.readNodeStatus({ name: 'node-1' });
    await admin.replaceNodeStatus({
      name: 'node-1',
      body: {
        ...node,
        status: {
          addresses: [{ type: 'InternalIP', address: '127.0.0.1' }],
          conditions: [{ type: 'Ready', status: 'True', reason: 'Test', lastHeartbeatTime: new Date() }],
        },
      },
    });
    await admin.createNamespacedService({
      namespace: 'vcluster-demo',
      body: service('alpha', servers.a?.port ?? 0),
    });
    await admin.createNamespacedService({
      namespace: 'vcluster-demo',
      body: service('beta', servers.b?.port ?? 0),
    });
    bed = await startFaultBed();
    // The adapter's own identity: only what the chart's RBAC grants it.
    const kubeconfig = join(bed.stateDir, 'kubeconfig');
    writeFileSync(
      kubeconfig,
      JSON.stringify({
        apiVersion: 'v1',
        kind: 'Config',
        clusters: [
          {
            name: 'test',
            cluster: { server: kube.env.KUBE_APISERVER_URL, 'certificate-authority': kube.env.KUBE_CA_FILE },
          },
        ],
        users: [{ name: 'adapter', user: { token: kube.env.KUBE_ADAPTER_TOKEN } }],
        contexts: [{ name: 'adapter', context: { cluster: 'test', user: 'adapter' } }],
        'current-context': 'adapter',
      }),
    );
    svc = await startServiceProcess(
      bed.env({
        KUBEBYON_TOPOLOGY: 'kubernetes',
        KUBECONFIG: kubeconfig,
        KUBEBYON_STATIC_NODE_ADDRESSES: '',
      }),
      bed.secret,
    );
  }, 300_000);
  afterAll(async () => {
    await svc?.stop();
    await bed?.stop();
    await kube?.stop();
    await Promise.all(Object.values(servers).map((s) => s.close()));
  });

  it('keeps every route on its last known endpoints while the API is down, and follows changes once it is back', async () => {
    await put('one', 'alpha');
    await put('two', 'beta');
    await reaches('one.example.com', 'a');
    await reaches('two.example.com', 'b');
    await waitFor(() => readyz(svc.url), 30_000, 'readiness with the watches up', {
      ok: (r) => r.status === 200,
    });
    const before = await bed.routes();

    await kube.down();
    const down = Date.now();
    let probes = 0;
    let notReady = 0;
    let samples = 0;
    try {
      await waitFor(() => readyz(svc.url), 20_000, 'readiness to report the watches down', {
        ok: (r) => r.status === 503 && r.body.checks.kubernetes_services?.ok === false,
      });
      expect(
        await metric(svc.url, 'kubebyon_haproxy_adapter_kubernetes_watch_up', { resource: 'services' }),
      ).toBe(0);
      // A cluster added meanwhile is stored; it names a Service the service saw before the outage.
      await put('three', 'beta');
      while (Date.now() - down < OUTAGE_MS) {
        for (const [host, server] of [
          ['one.example.com', 'a'],
          ['two.example.com', 'b'],
        ] as const) {
          expect({ host, probe: await sniProbe(bed.sniPort, host) }).toEqual({
            host,
            probe: { reached: server },
          });
          probes++;
        }
        // No route removed: what HAProxy runs only grows.
        const now = await bed.routes();
        for (const [host, endpoints] of before) expect(now.get(host)).toEqual(endpoints);
        samples++;
        if ((await readyz(svc.url)).status === 503) notReady++;
        await sleep(2_000);
      }
    } finally {
      await kube.up();
    }
    const up = Date.now();
    await waitFor(() => readyz(svc.url), 60_000, 'readiness once the API is back', {
      ok: (r) => r.status === 200,
    });
    expect(
      await metric(svc.url, 'kubebyon_haproxy_adapter_kubernetes_watch_up', { resource: 'services' }),
    ).toBe(1);
    await reaches('three.example.com', 'b');
    // Following the cluster again: a NodePort that moves after the outage moves the route.
    const current = await admin.readNamespacedService({ name: 'alpha', namespace: 'vcluster-demo' });
    const ports = current.spec?.ports ?? [];
    await admin.replaceNamespacedService({
      name: 'alpha',
      namespace: 'vcluster-demo',
      body: {
        ...current,
        spec: { ...current.spec, ports: ports.map((p) => ({ ...p, nodePort: servers.c?.port ?? 0 })) },
      },
    });
    await reaches('one.example.com', 'c');
    console.log(
      `[measure] kube-apiserver down ${Math.round((up - down) / 1000)} s: ${probes} SNI probes all reached their backend, not ready in ${notReady}/${samples} samples, ready again ${((Date.now() - up) / 1000).toFixed(1)} s after`,
    );
    expect(notReady).toBe(samples);
  });
});
