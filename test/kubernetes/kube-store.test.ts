import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { CustomObjectsApi, KubernetesObjectApi, Watch } from '@kubernetes/client-node';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ClusterStore } from '../../src/store/cluster-store.js';
import { type PublishedStatus, StaleWriteError } from '../../src/store/desired-store.js';
import { importStateFile } from '../../src/store/import-state.js';
import { objectName } from '../../src/store/kube-route.js';
import { KubeClusterStore } from '../../src/store/kube-store.js';
import { chartRbac } from '../support/chart.js';
import { applyClusterRouteCrd, type KubeApiserver, startKubeApiserver } from '../support/kube-apiserver.js';
import { waitFor } from '../support/wait.js';

// The ClusterRoute store against a real kube-apiserver, as the adapter's ServiceAccount (the chart's RBAC): two
// store instances on one namespace stand for two replicas.
const KUBECTL = join(process.env.KUBEBYON_KUBE_CACHE ?? '/var/cache/kubebyon-kube', 'bin/kubectl');
const NS = 'kubebyon-system';
const base = { group: 'kubebyon.io', version: 'v1alpha1', namespace: NS, plural: 'clusterroutes' };
const port = (nodePort: number) => ({ nodePort });
const stamp = (signedAt: number, signature = `sha256=${signedAt}`) => ({ signedAt, signature });

describe('KubeClusterStore against a real kube-apiserver', () => {
  let kube: KubeApiserver;
  let admin: CustomObjectsApi;
  let a: KubeClusterStore;
  let b: KubeClusterStore;
  const bChanges: string[] = [];
  let clock = 1_700_000_000_000;
  const logger = pino({ level: process.env.KUBE_STORE_TEST_LOG ?? 'silent' });
  const stored = async (cluster: string) =>
    (await admin.getNamespacedCustomObject({ ...base, name: objectName(cluster) })) as {
      metadata: { resourceVersion: string };
      spec: Record<string, unknown>;
      status?: Record<string, unknown>;
    };

  beforeAll(async () => {
    kube = await startKubeApiserver();
    const objects = kube.admin.makeApiClient(KubernetesObjectApi);
    await objects.create({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: NS } });
    await applyClusterRouteCrd(kube);
    for (const m of chartRbac()) await objects.create(m);
    const adapterApi = kube.adapter.makeApiClient(CustomObjectsApi);
    await waitFor(() => adapterApi.listNamespacedCustomObject(base), 15_000, 'RBAC and the CRD to serve');
    admin = kube.admin.makeApiClient(CustomObjectsApi);
    const options = { namespace: NS, logger, tombstoneMs: 60_000 };
    a = await KubeClusterStore.open(kube.adapter, { ...options, now: () => clock });
    b = await KubeClusterStore.open(kube.adapter, options);
    b.onChange((names) => bChanges.push(...names));
  }, 300_000);

  afterAll(async () => {
    await a?.close();
    await b?.close();
    await kube?.stop();
  });

  it('opens healthy, and gives up on a namespace the RBAC does not grant', async () => {
    expect(await a.health()).toEqual({ ok: true });
    expect(a.list()).toEqual([]);
    await expect(
      KubeClusterStore.open(kube.adapter, {
        namespace: 'default',
        logger,
        tombstoneMs: 1,
        syncTimeoutMs: 1500,
      }),
    ).rejects.toThrow(/not listed within 1500 ms: HTTP 403: .*cannot list resource "clusterroutes"/);
  });

  it('round-trips upsert, get, list and delete; keeps claimedAt on the same host; versions grow', async () => {
    clock += 1000;
    const first = await a.upsert({ name: 'demo', host: 'demo.example.com', target: port(30001) });
    expect(first).toEqual({
      name: 'demo',
      host: 'demo.example.com',
      target: port(30001),
      claimedAt: clock,
      updatedAt: clock,
    });
    expect(a.get('demo')).toEqual(first);
    expect((await stored('demo')).spec).toEqual({
      cluster: 'demo',
      host: 'demo.example.com',
      target: port(30001),
      claimedAt: clock,
      updatedAt: clock,
    });

    // Same millisecond, same host: the claim stays, the version still moves.
    const second = await a.upsert({ name: 'demo', host: 'demo.example.com', target: port(30002) });
    expect(second.claimedAt).toBe(first.claimedAt);
    expect(second.updatedAt).toBeGreaterThan(first.updatedAt);
    clock += 1000;
    const moved = await a.upsert({ name: 'demo', host: 'other.example.com', target: port(30002) });
    expect(moved.claimedAt).toBe(clock);
    expect(moved.updatedAt).toBeGreaterThan(second.updatedAt);

    // A name Kubernetes does not take as an object name is stored under its hash, and read back as it was.
    const odd = await a.upsert({ name: 'Team_A', host: 'team-a.example.com', target: port(30003) });
    expect(objectName('Team_A')).toMatch(/^h-[0-9a-f]{40}$/);
    expect((await stored('Team_A')).spec.cluster).toBe('Team_A');
    expect(a.list().map((c) => c.name)).toEqual(['Team_A', 'demo']);
    expect(a.get('Team_A')).toEqual(odd);

    expect(await a.delete('Team_A')).toBe(true);
    expect(await a.delete('Team_A')).toBe(false);
    expect(a.get('Team_A')).toBeUndefined();
    await expect(stored('Team_A')).rejects.toMatchObject({ code: 404 });
  });

  it('ignores an object whose spec.cluster does not map to its name', async () => {
    await admin.createNamespacedCustomObject({
      ...base,
      body: {
        apiVersion: 'kubebyon.io/v1alpha1',
        kind: 'ClusterRoute',
        metadata: { name: 'impostor' },
        spec: { cluster: 'victim', host: 'x.example.com', target: port(30009), claimedAt: 1, updatedAt: 1 },
      },
    });
    await b.upsert({ name: 'after-impostor', host: 'after.example.com', target: port(30010) });
    await waitFor(() => a.get('after-impostor'), 10_000, 'a later write to reach store a');
    expect(a.get('victim')).toBeUndefined();
    expect(a.list().map((c) => c.name)).not.toContain('victim');
  });

  it('round-trips authorized networks: written canonical, read by the other replica, cleared by an open write', async () => {
    const networks = ['10.0.0.0/8', '198.51.100.7/32', '2001:db8::/32'];
    const written = await a.upsert({
      name: 'listed',
      host: 'listed.example.com',
      target: port(30012),
      authorizedNetworks: networks,
    });
    expect(written.authorizedNetworks).toEqual(networks);
    expect((await stored('listed')).spec.authorizedNetworks).toEqual(networks);
    await waitFor(() => b.get('listed')?.authorizedNetworks, 10_000, 'the list to reach store b');
    expect(b.get('listed')).toEqual(written);
    // An open write (no list) removes the field.
    const version = (await stored('listed')).metadata.resourceVersion;
    await a.upsert({ name: 'listed', host: 'listed.example.com', target: port(30012) });
    expect((await stored('listed')).spec).not.toHaveProperty('authorizedNetworks');
    expect((await stored('listed')).metadata.resourceVersion).not.toBe(version);
    await waitFor(() => b.get('listed')?.authorizedNetworks === undefined, 10_000, 'b to see the list gone');
    await a.delete('listed');
  });

  it("refuses a malformed entry in the API server's schema (server-side, kubectl apply too)", async () => {
    const object = (name: string, authorizedNetworks: unknown) => ({
      apiVersion: 'kubebyon.io/v1alpha1',
      kind: 'ClusterRoute',
      metadata: { name, namespace: NS },
      spec: {
        cluster: name,
        host: `${name}.example.com`,
        target: port(30013),
        authorizedNetworks,
        claimedAt: 1,
        updatedAt: 1,
      },
    });
    const refused: Array<[unknown, RegExp]> = [
      [['10.0.0.5/24'], /without host bits/],
      [['2001:db8::1/32'], /without host bits/],
      [['nope'], /authorizedNetworks\[0\]/],
      [['10.0.0.0/33'], /authorizedNetworks\[0\]/],
      [['010.0.0.1'], /authorizedNetworks\[0\]/],
      [['10.0.0.0/08'], /authorizedNetworks\[0\]/],
      [['::ffff:1.2.3.4'], /without host bits/],
      [['::ffff:1.2.3.0/120'], /without host bits/],
      [['fe80::1%eth0'], /authorizedNetworks\[0\]/],
      [['10.0.0.1 '], /authorizedNetworks\[0\]/],
      [['10.0.0.0/8', '10.0.0.0/8'], /Duplicate value/],
      [Array.from({ length: 65 }, (_, i) => `10.${i}.0.0/16`), /must have at most 64 items/],
      [['1'.repeat(65)], /authorizedNetworks\[0\]/],
      ['10.0.0.0/8', /must be of type array|Invalid value: "string"/],
      [[8], /Invalid value: "integer"|must be of type string/],
    ];
    for (const [i, [networks, message]] of refused.entries()) {
      const err = await admin
        .createNamespacedCustomObject({ ...base, body: object(`bad-${i}`, networks) })
        .then(
          () => undefined,
          (e: unknown) => e as { code?: number; body?: string },
        );
      expect(err, JSON.stringify(networks)).toMatchObject({ code: 422 });
      expect(String(err?.body), JSON.stringify(networks)).toMatch(message);
    }
    // What kubectl apply says to a person.
    const apply = (o: object) =>
      spawnSync(KUBECTL, ['apply', '-f', '-'], {
        input: JSON.stringify(o),
        env: { ...process.env, KUBECONFIG: kube.env.KUBECONFIG ?? '' },
        encoding: 'utf8',
      });
    const bad = apply(object('by-hand', ['192.168.1.10/24']));
    expect(bad.status).not.toBe(0);
    expect(bad.stderr).toMatch(
      /spec\.authorizedNetworks\[0\].*must be an IPv4 or IPv6 address or CIDR without host bits/,
    );
    // A good one by hand, written in another spelling and order: read canonical.
    const good = apply(object('by-hand', ['2001:DB8::/32', '192.168.1.10', '192.168.1.0/24']));
    expect(good.status, good.stderr).toBe(0);
    await waitFor(() => a.get('by-hand'), 10_000, 'the object written by hand to reach store a');
    expect(a.get('by-hand')?.authorizedNetworks).toEqual([
      '192.168.1.0/24',
      '192.168.1.10/32',
      '2001:db8::/32',
    ]);
    // Taken by the schema, not by the adapter (duplicates once canonical): ignored like any invalid spec.
    const dup = apply(object('by-hand-dup', ['10.0.0.1', '10.0.0.1/32']));
    expect(dup.status, dup.stderr).toBe(0);
    await b.upsert({ name: 'after-dup', host: 'after-dup.example.com', target: port(30014) });
    await waitFor(() => a.get('after-dup'), 10_000, 'a later write to reach store a');
    expect(a.get('by-hand-dup')).toBeUndefined();
    // A webhook write over it makes it valid again.
    await a.upsert({
      name: 'by-hand-dup',
      host: 'dup.example.com',
      target: port(30015),
      authorizedNetworks: ['10.0.0.1/32'],
    });
    expect(a.get('by-hand-dup')?.authorizedNetworks).toEqual(['10.0.0.1/32']);
    for (const name of ['by-hand', 'by-hand-dup', 'after-dup']) await a.delete(name);
  });

  it("shows one replica's write in the other's list, and tells its onChange", async () => {
    bChanges.length = 0;
    const written = await a.upsert({ name: 'shared', host: 'shared.example.com', target: port(30011) });
    await waitFor(() => b.get('shared'), 10_000, 'the write to reach store b');
    expect(b.get('shared')).toEqual(written);
    expect(b.list().map((c) => c.name)).toContain('shared');
    await waitFor(() => bChanges.includes('shared'), 5_000, "b's onChange");
    bChanges.length = 0;
    await a.delete('shared');
    await waitFor(() => b.get('shared') === undefined, 10_000, 'the delete to reach store b');
    expect(bChanges).toContain('shared');
  });

  it('refuses replayed and older signed writes across replicas, and tombstones signed deletes', async () => {
    const t = Math.floor(clock / 1000);
    await a.upsert({ name: 'signed', host: 'new.example.com', target: port(30020) }, stamp(t + 2));
    const before = await stored('signed');
    await expect(
      b.upsert({ name: 'signed', host: 'old.example.com', target: port(30021) }, stamp(t + 1)),
    ).rejects.toBeInstanceOf(StaleWriteError);
    await expect(
      b.upsert({ name: 'signed', host: 'old.example.com', target: port(30021) }, stamp(t + 2)),
    ).rejects.toBeInstanceOf(StaleWriteError);
    expect((await stored('signed')).metadata.resourceVersion).toBe(before.metadata.resourceVersion);
    expect((await stored('signed')).spec.host).toBe('new.example.com');

    const same = await b.upsert(
      { name: 'signed', host: 'same.example.com', target: port(30022) },
      stamp(t + 2, 'sha256=other'),
    );
    expect(same.host).toBe('same.example.com');
    expect((await stored('signed')).spec).toMatchObject({
      signedAt: t + 2,
      signatures: [`sha256=${t + 2}`, 'sha256=other'],
    });

    // A signed delete leaves a tombstone: the replayed upsert (from either replica) cannot revive it.
    await waitFor(() => a.get('signed')?.host === 'same.example.com', 10_000, 'a to see b');
    expect(await a.delete('signed', stamp(t + 3))).toBe(true);
    expect(a.get('signed')).toBeUndefined();
    expect((await stored('signed')).spec).toMatchObject({ deleted: true, signedAt: t + 3 });
    await expect(
      b.upsert(
        { name: 'signed', host: 'same.example.com', target: port(30022) },
        stamp(t + 2, 'sha256=other'),
      ),
    ).rejects.toBeInstanceOf(StaleWriteError);
    await waitFor(() => b.list().every((c) => c.name !== 'signed'), 10_000, 'b to drop the tombstone');
    expect(b.get('signed')).toBeUndefined();

    // A newer write revives it, as a new claim.
    clock += 5000;
    await a.upsert({ name: 'revived', host: 'r.example.com', target: port(30023) }, stamp(t + 1));
    await a.delete('revived', stamp(t + 4));
    const revived = await a.upsert(
      { name: 'revived', host: 'r.example.com', target: port(30023) },
      stamp(t + 5),
    );
    expect(revived.claimedAt).toBe(clock);
    expect((await stored('revived')).spec.deleted).toBeUndefined();

    // Sweeping removes tombstones older than tombstoneMs only.
    await a.delete('revived', stamp(t + 100));
    clock = (t + 3) * 1000 + 30_000;
    expect(await a.sweepTombstones()).toEqual([]);
    clock = (t + 3) * 1000 + 61_000;
    expect(await a.sweepTombstones()).toEqual(['signed']);
    await expect(stored('signed')).rejects.toMatchObject({ code: 404 });
    expect((await stored('revived')).spec.deleted).toBe(true);
  });

  it('ends concurrent writes from both replicas with the highest-stamped one', async () => {
    const t = Math.floor(clock / 1000) + 1000;
    // b climbs through the odd stamps while a writes the even ones in random order: many writes are
    // admissible when decided, so replaces race on the resourceVersion and retry; some are stale by then.
    const evens = Array.from({ length: 20 }, (_, i) => 2 * i).sort(() => Math.random() - 0.5);
    const odds = Array.from({ length: 20 }, (_, i) => 2 * i + 1);
    const write = (store: KubeClusterStore, k: number) =>
      store.upsert({ name: 'contended', host: `h${k}.example.com`, target: port(31000 + k) }, stamp(t + k));
    const writes = evens.flatMap((k, i) => [write(a, k), write(b, odds[i] as number)]);
    const results = await Promise.allSettled(writes);
    const failures = results.filter((r) => r.status === 'rejected').map((r) => r.reason);
    for (const f of failures) expect(f).toBeInstanceOf(StaleWriteError);
    expect(failures.length).toBeGreaterThan(0);
    expect((await stored('contended')).spec).toMatchObject({ host: 'h39.example.com', signedAt: t + 39 });
    for (const store of [a, b])
      await waitFor(() => store.get('contended')?.host === 'h39.example.com', 10_000, 'both caches to agree');
  });

  it('publishes the status subresource, coalesced, and reads it back', async () => {
    await a.upsert({ name: 'status-demo', host: 'status.example.com', target: port(30030) });
    await waitFor(() => b.get('status-demo'), 10_000, 'b to see the cluster');
    bChanges.length = 0;
    const status = (i: number): PublishedStatus => ({
      state: 'active',
      reason: null,
      api_endpoint: `status.example.com:${i}`,
      last_applied_at: '2024-01-01T00:00:00Z',
      observed: i,
      instances: [{ name: 'haproxy-0', state: 'applied', reason: null, last_applied_at: null }],
    });
    const start = (await stored('status-demo')).metadata.resourceVersion;
    const modified: unknown[] = [];
    const watching = await new Watch(kube.admin).watch(
      `/apis/kubebyon.io/v1alpha1/namespaces/${NS}/clusterroutes`,
      { fieldSelector: `metadata.name=status-demo`, resourceVersion: start },
      (phase, obj) => phase === 'MODIFIED' && modified.push(obj),
      () => {},
    );
    const writesBefore = a.statusWrites();
    for (let i = 1; i <= 50; i++) a.publish('status-demo', status(i));
    await a.flush();
    expect(a.statusWrites() - writesBefore).toBeLessThanOrEqual(3);
    expect(a.published('status-demo')).toEqual(status(50));
    expect((await stored('status-demo')).status).toMatchObject({
      state: 'active',
      apiEndpoint: 'status.example.com:50',
      observedUpdatedAt: 50,
    });
    // Publishing what is stored again writes nothing.
    a.publish('status-demo', status(50));
    await a.flush();
    expect(a.statusWrites() - writesBefore).toBeLessThanOrEqual(3);
    await waitFor(() => b.published('status-demo')?.observed === 50, 10_000, 'b to see the status');
    expect(modified.length).toBeGreaterThan(0);
    expect(modified.length).toBeLessThanOrEqual(3);
    watching.abort();
    // A status-only change is no change of the desired state.
    expect(bChanges).toEqual([]);

    const table = execFileSync(KUBECTL, ['get', 'clusterroutes', '-n', NS, 'status-demo'], {
      env: { ...process.env, KUBECONFIG: kube.env.KUBECONFIG ?? '' },
      encoding: 'utf8',
    });
    expect(table).toMatch(/CLUSTER\s+HOST\s+STATE\s+ENDPOINT/);
    expect(table).toMatch(/status-demo\s+status\.example\.com\s+active\s+status\.example\.com:50/);
  });

  it('imports a ClusterStore state file with its claims, once', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'kubebyon-import-'));
    try {
      const file = join(dir, 'state.json');
      const local = await ClusterStore.open(file);
      await local.upsert({ name: 'imp-a', host: 'imp-a.example.com', target: port(30040) }, undefined, 1_000);
      await local.upsert({ name: 'imp_B', host: 'imp-b.example.com', target: port(30041) }, undefined, 2_000);
      await local.upsert({ name: 'imp_B', host: 'imp-b.example.com', target: port(30042) }, undefined, 3_000);
      expect(await importStateFile(file, a)).toEqual({ imported: 2, skipped: 0 });
      expect(a.get('imp-a')).toMatchObject({ claimedAt: 1_000, updatedAt: 1_000 });
      expect(a.get('imp_B')).toMatchObject({ claimedAt: 2_000, updatedAt: 3_000, target: port(30042) });
      expect((await stored('imp_B')).spec).toMatchObject({ cluster: 'imp_B', claimedAt: 2_000 });
      await waitFor(() => b.get('imp_B'), 10_000, 'b to see the import');
      expect(await importStateFile(file, b)).toEqual({ imported: 0, skipped: 2 });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('replaces the whole set per the stamp rule, and refuses a replayed replaceAll', async () => {
    // Its own namespace (as admin): replaceAll removes whatever else is there.
    const ns = 'kubebyon-replace';
    await kube.admin
      .makeApiClient(KubernetesObjectApi)
      .create({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: ns } });
    const c = await KubeClusterStore.open(kube.admin, { namespace: ns, logger, tombstoneMs: 60_000 });
    const d = await KubeClusterStore.open(kube.admin, { namespace: ns, logger, tombstoneMs: 60_000 });
    try {
      const t = 1_800_000_000;
      const keep = await c.upsert({ name: 'keep', host: 'keep.example.com', target: port(30050) }, stamp(t));
      await c.upsert({ name: 'drop', host: 'drop.example.com', target: port(30051) }, stamp(t));
      await c.upsert({ name: 'newer', host: 'newer.example.com', target: port(30052) }, stamp(t + 10));
      await c.upsert({ name: 'bearer', host: 'bearer.example.com', target: port(30053) });
      const inputs = [
        { name: 'keep', host: 'keep.example.com', target: port(30050) },
        { name: 'newer', host: 'older.example.com', target: port(30059) },
        { name: 'fresh', host: 'fresh.example.com', target: port(30054) },
      ];
      // Through the other replica, whose cache may lag: it lists afresh.
      const { removed } = await d.replaceAll(inputs, stamp(t + 5));
      expect(removed).toEqual(['bearer', 'drop']);
      const e = (await c.replaceAll([], stamp(t + 5)).catch((err: unknown) => err)) as Error;
      expect(e).toBeInstanceOf(StaleWriteError);
      expect(d.get('keep')).toEqual(keep);
      expect(d.get('newer')?.host).toBe('newer.example.com');
      expect(d.get('fresh')?.host).toBe('fresh.example.com');
      expect(d.list().map((r) => r.name)).toEqual(['fresh', 'keep', 'newer']);
      // The unchanged cluster took the stamp: an older write replayed to it is refused.
      await expect(
        c.upsert({ name: 'keep', host: 'evil.example.com', target: port(30050) }, stamp(t + 1)),
      ).rejects.toBeInstanceOf(StaleWriteError);
      await expect(
        c.upsert({ name: 'drop', host: 'drop.example.com', target: port(30051) }, stamp(t + 1)),
      ).rejects.toBeInstanceOf(StaleWriteError);
      const unsigned = await d.replaceAll([inputs[0] as (typeof inputs)[0]]);
      expect(unsigned.removed).toEqual(['fresh', 'newer']);
      expect(d.list().map((r) => r.name)).toEqual(['keep']);
    } finally {
      await c.close();
      await d.close();
    }
  });
});

// Outside vitest, whose own handles keep any process alive: a process whose only work is opening the store.
describe('KubeClusterStore.open in a process of its own', () => {
  it('keeps the process alive while the first list fails and is tried again, until its timeout', async () => {
    const { freeLoopbackPort } = await import('../support/ports.js');
    // Nothing listens there: every list fails at once, and the watch waits (on unref'd timers) to retry.
    const server = `https://127.0.0.1:${await freeLoopbackPort()}`;
    const store = pathToFileURL(join(import.meta.dirname, '../../src/store/kube-store.ts')).href;
    const script = `
import { KubeConfig } from '@kubernetes/client-node';
import pino from 'pino';
import { KubeClusterStore } from ${JSON.stringify(store)};
const kc = new KubeConfig();
kc.loadFromOptions({
  clusters: [{ name: 'c', server: ${JSON.stringify(server)}, skipTLSVerify: true }],
  users: [{ name: 'u', token: 't' }],
  contexts: [{ name: 'x', cluster: 'c', user: 'u' }],
  currentContext: 'x',
});
try {
  await KubeClusterStore.open(kc, { namespace: 'ns', logger: pino({ level: 'silent' }), syncTimeoutMs: 3000 });
  console.log('opened');
} catch (err) {
  console.log('refused:', err.message);
  process.exitCode = 1;
}
`;
    const started = Date.now();
    const r = spawnSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
      cwd: join(import.meta.dirname, '../..'),
      encoding: 'utf8',
      timeout: 60_000,
    });
    // Before: exit 13 (a top-level await left unsettled) within a second, the event loop left empty.
    expect({ status: r.status, stdout: r.stdout.trim() }, r.stderr).toEqual({
      status: 1,
      stdout: expect.stringMatching(/^refused: ClusterRoutes not listed within 3000 ms/),
    });
    expect(Date.now() - started).toBeGreaterThanOrEqual(3000);
  });
});
