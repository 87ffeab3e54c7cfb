import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CustomObjectsApi, KubernetesObjectApi } from '@kubernetes/client-node';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { main } from '../../src/cli/main.js';
import { ClusterStore } from '../../src/store/cluster-store.js';
import { objectName } from '../../src/store/kube-route.js';
import { chartRbac } from '../support/chart.js';
import { applyClusterRouteCrd, type KubeApiserver, startKubeApiserver } from '../support/kube-apiserver.js';
import { waitFor } from '../support/wait.js';

// `import-state` through the command line's entry, against a real kube-apiserver, as the adapter's
// ServiceAccount (the chart's RBAC) with nothing but its kubeconfig and the namespace set: no
// webhook secret, no Data Plane API password.
const NS = 'kubebyon-system';
const base = { group: 'kubebyon.io', version: 'v1alpha1', namespace: NS, plural: 'clusterroutes' };
const port = (nodePort: number) => ({ nodePort });

describe('import-state against a real kube-apiserver', () => {
  let kube: KubeApiserver;
  let objects: KubernetesObjectApi;
  let dir: string;
  let env: NodeJS.ProcessEnv;

  const run = async (args: string[], over: NodeJS.ProcessEnv = {}) => {
    const out: string[] = [];
    const err: string[] = [];
    const io = { out: (l: string) => out.push(l), err: (l: string) => err.push(l) };
    const code = await main(args, { ...env, ...over }, io, { logger: pino({ level: 'silent' }) });
    return { code, out: out.join('\n'), err: err.join('\n') };
  };
  const stored = async (cluster: string) =>
    (
      (await kube.admin
        .makeApiClient(CustomObjectsApi)
        .getNamespacedCustomObject({ ...base, name: objectName(cluster) })) as {
        spec: Record<string, unknown>;
      }
    ).spec;

  beforeAll(async () => {
    kube = await startKubeApiserver();
    objects = kube.admin.makeApiClient(KubernetesObjectApi);
    await objects.create({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: NS } });
    for (const m of chartRbac()) await objects.create(m);
    dir = mkdtempSync(join(tmpdir(), 'kubebyon-import-cli-'));
    // The adapter's identity (current context) in a kubeconfig of its own, named by the command's KUBECONFIG.
    const kubeconfig = join(dir, 'adapter.kubeconfig');
    writeFileSync(kubeconfig, kube.adapter.exportConfig());
    env = { KUBECONFIG: kubeconfig, KUBEBYON_KUBERNETES_NAMESPACE: NS };
  }, 300_000);

  afterAll(async () => {
    await kube?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('says which file is missing, before asking Kubernetes anything', async () => {
    const r = await run(['import-state', join(dir, 'nowhere.json')], { KUBECONFIG: join(dir, 'none') });
    expect(r.code).toBe(1);
    expect(r.err).toBe(`import-state: no state file at ${join(dir, 'nowhere.json')}`);
    expect(r.out).toBe('');
  });

  it('names a bad namespace as a configuration problem', async () => {
    const r = await run(['import-state', join(dir, 'nowhere.json')], {
      KUBEBYON_KUBERNETES_NAMESPACE: 'Not_A_Namespace',
    });
    expect(r.code).toBe(1);
    expect(r.err).toMatch(/^import-state: invalid configuration:\n {2}- KUBEBYON_KUBERNETES_NAMESPACE: /);
  });

  it('says to install the chart while the CRD is not installed, and what rights are missing when refused', async () => {
    const file = join(dir, 'early.json');
    const local = await ClusterStore.open(file);
    await local.upsert({ name: 'early', host: 'early.example.com', target: port(30100) });
    const noCrd = await run(['import-state', file]);
    expect(noCrd.code).toBe(1);
    expect(noCrd.err).toMatch(/CRD .* is not installed: install the chart charts\/kubebyon-haproxy-adapter/);
    expect(noCrd.out).toBe('');

    await applyClusterRouteCrd(kube);
    const adapterApi = kube.adapter.makeApiClient(CustomObjectsApi);
    await waitFor(() => adapterApi.listNamespacedCustomObject(base), 15_000, 'RBAC and the CRD to serve');
    // The Role grants the ClusterRoutes of the adapter's own namespace only.
    const elsewhere = await run(['import-state', file], { KUBEBYON_KUBERNETES_NAMESPACE: 'default' });
    expect(elsewhere.code).toBe(1);
    expect(elsewhere.err).toMatch(
      /not allowed to list ClusterRoutes in namespace default .*the chart's ServiceAccount/,
    );
  });

  it('imports each cluster with its spec and claim, and skips them when run again', async () => {
    const file = join(dir, 'state', 'clusters.json');
    const local = await ClusterStore.open(file);
    await local.upsert({ name: 'imp-a', host: 'imp-a.example.com', target: port(30040) }, undefined, 1_000);
    await local.upsert({ name: 'imp_B', host: 'imp-b.example.com', target: port(30041) }, undefined, 2_000);
    // A later change of imp_B, still in the journal: the claim stays its first one; its list comes along.
    const networks = ['10.0.0.0/8', '2001:db8::/32'];
    await local.upsert(
      { name: 'imp_B', host: 'imp-b.example.com', target: port(30042), authorizedNetworks: networks },
      undefined,
      3_000,
    );

    const first = await run(['import-state', file]);
    expect(first).toEqual({ code: 0, out: 'imported 2, skipped 0 (already there)', err: '' });
    expect(await stored('imp-a')).toEqual({
      cluster: 'imp-a',
      host: 'imp-a.example.com',
      target: port(30040),
      claimedAt: 1_000,
      updatedAt: 1_000,
    });
    expect(await stored('imp_B')).toEqual({
      cluster: 'imp_B',
      host: 'imp-b.example.com',
      target: port(30042),
      authorizedNetworks: networks,
      claimedAt: 2_000,
      updatedAt: 3_000,
    });

    const again = await run(['import-state', file]);
    expect(again).toEqual({ code: 0, out: 'imported 0, skipped 2 (already there)', err: '' });

    // A cluster added to the file since: only it is created; the others stay as they are.
    await local.upsert({ name: 'imp-c', host: 'imp-c.example.com', target: port(30043) }, undefined, 4_000);
    const third = await run(['import-state', file]);
    expect(third).toEqual({ code: 0, out: 'imported 1, skipped 2 (already there)', err: '' });
    expect(await stored('imp-c')).toMatchObject({ cluster: 'imp-c', claimedAt: 4_000, updatedAt: 4_000 });
    expect(await stored('imp_B')).toMatchObject({ target: port(30042), updatedAt: 3_000 });
  });
});
