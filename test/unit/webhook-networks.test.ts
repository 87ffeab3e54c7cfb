import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { loadAllYaml } from '@kubernetes/client-node';
import { Ajv2020 } from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import fc from 'fast-check';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  formatNetwork,
  MAX_AUTHORIZED_NETWORKS,
  MAX_NETWORK_LENGTH,
  NETWORK_PATTERN,
  parseNetwork,
} from '../../src/routes/networks.js';
import { ClusterStore } from '../../src/store/cluster-store.js';
import { CRD_FILE } from '../support/chart.js';
import { PROPERTY_TIMEOUT_MS } from '../support/property.js';
import { startWebhookApp, type WebhookApp } from '../support/webhook-app.js';

// authorized_networks through the webhook: stored canonical, shown by GET, refused with 422 (the entry and
// the reason) or 400 (not an array of strings) without changing anything.

const body = (networks?: unknown, host = 'api.demo.example.com') => ({
  control_plane_host: host,
  public_access_mode: 'loadbalancer',
  node_port: 30443,
  ...(networks === undefined ? {} : { authorized_networks: networks }),
});

describe('authorized_networks through the webhook', () => {
  let app: WebhookApp;
  const onDisk = () => ClusterStore.read(join(app.dir, 'state.json')).catch(() => []);
  const journalText = () => {
    try {
      return readFileSync(join(app.dir, 'state.json.journal'), 'utf8');
    } catch {
      return '';
    }
  };

  beforeEach(async () => {
    app = await startWebhookApp();
  });
  afterEach(async () => {
    await app.stop();
  });

  it('stores the canonical list, sorted, and shows it in GET /v1/clusters and /v1/clusters/{name}', async () => {
    const put = await app.client.request(
      'PUT',
      '/v1/clusters/demo',
      body(['2001:DB8:0:0:0:0:0:0/32', '198.51.100.7', '10.0.0.0/8']),
    );
    expect(put.status).toBe(202);
    expect(put.body.authorized_networks).toEqual(['10.0.0.0/8', '198.51.100.7/32', '2001:db8::/32']);
    expect(app.store.get('demo')?.authorizedNetworks).toEqual([
      '10.0.0.0/8',
      '198.51.100.7/32',
      '2001:db8::/32',
    ]);
    await app.client.request('PUT', '/v1/clusters/open', body(undefined, 'api.open.example.com'));
    expect((await app.client.request('POST', '/v1/reconcile?wait=true')).status).toBe(200);
    const one = await app.client.request('GET', '/v1/clusters/demo');
    expect(one.body).toMatchObject({
      state: 'applied',
      authorized_networks: ['10.0.0.0/8', '198.51.100.7/32', '2001:db8::/32'],
    });
    const all = await app.client.request('GET', '/v1/clusters');
    expect(
      all.body.clusters.map((c: { name: string; authorized_networks: string[] }) => [
        c.name,
        c.authorized_networks,
      ]),
    ).toEqual([
      ['demo', ['10.0.0.0/8', '198.51.100.7/32', '2001:db8::/32']],
      ['open', []],
    ]);
    // The open cluster's record carries no field at all; on disk as in memory.
    expect(app.store.get('open')).not.toHaveProperty('authorizedNetworks');
    expect(await onDisk()).toEqual(app.store.list());
  });

  it('stores the same record for the same list in any order or spelling', async () => {
    await app.client.request(
      'PUT',
      '/v1/clusters/a',
      body(['10.0.0.1', '2001:db8::/32', '192.168.0.0/16'], 'a.example.com'),
    );
    await app.client.request(
      'PUT',
      '/v1/clusters/b',
      body(['2001:0DB8::/32', '192.168.0.0/16', '10.0.0.1/32'], 'a.example.com'),
    );
    const a = app.store.get('a');
    const b = app.store.get('b');
    expect(a?.authorizedNetworks).toEqual(['10.0.0.1/32', '192.168.0.0/16', '2001:db8::/32']);
    expect(b?.authorizedNetworks).toEqual(a?.authorizedNetworks);
  });

  it('takes absent, null and [] alike as open to all; a PUT without the field opens a listed cluster', async () => {
    for (const networks of [undefined, null, []]) {
      const res = await app.client.request('PUT', '/v1/clusters/demo', body(networks));
      expect(res.status).toBe(202);
      expect(res.body.authorized_networks).toEqual([]);
      expect(app.store.get('demo')).not.toHaveProperty('authorizedNetworks');
    }
    await app.client.request('PUT', '/v1/clusters/demo', body(['10.0.0.0/8']));
    expect(app.store.get('demo')?.authorizedNetworks).toEqual(['10.0.0.0/8']);
    // PUT replaces the cluster: what it leaves out is gone.
    await app.client.request('PUT', '/v1/clusters/demo', body());
    expect(app.store.get('demo')).not.toHaveProperty('authorizedNetworks');
  });

  it.each([
    [
      ['10.0.0.0/8', '::1', '192.168.0.0/16', '10.0.0.5/24'],
      'authorized_networks.3',
      'network_host_bits_set',
    ],
    [['nope'], 'authorized_networks.0', 'network_invalid'],
    [['10.0.0.0/33'], 'authorized_networks.0', 'network_prefix_invalid'],
    [['10.0.0.0/08'], 'authorized_networks.0', 'network_prefix_invalid'],
    [['::/129'], 'authorized_networks.0', 'network_prefix_invalid'],
    [['010.0.0.1'], 'authorized_networks.0', 'network_invalid'],
    [['fe80::1%eth0'], 'authorized_networks.0', 'network_invalid'],
    [['::ffff:1.2.3.4'], 'authorized_networks.0', 'network_ipv4_mapped'],
    [['10.0.0.1', '10.0.0.1/32'], 'authorized_networks.1', 'network_duplicate'],
    [['', '10.0.0.1'], 'authorized_networks.0', 'network_invalid'],
    [['x'.repeat(5000)], 'authorized_networks.0', 'network_invalid'],
    [['10.0.0.1\n  use_backend evil'], 'authorized_networks.0', 'network_invalid'],
    [Array.from({ length: 65 }, (_, i) => `10.0.${i}.0/24`), 'authorized_networks', 'too_many_networks'],
  ])('refuses %j with 422, field %s, reason %s, and changes nothing', async (networks, field, reason) => {
    await app.client.request('PUT', '/v1/clusters/demo', body(['203.0.113.0/24']));
    const before = { memory: app.store.list(), disk: await onDisk(), journal: journalText() };
    const res = await app.client.request('PUT', '/v1/clusters/demo', body(networks));
    expect(res.status).toBe(422);
    expect(res.body).toMatchObject({ error: 'invalid_request', field, reason });
    expect(res.body.detail.length).toBeLessThan(300);
    expect(app.store.list()).toEqual(before.memory);
    expect(await onDisk()).toEqual(before.disk);
    expect(journalText()).toBe(before.journal);
  });

  it.each([
    ['10.0.0.0/8', 'authorized_networks'],
    [{ 0: '10.0.0.0/8' }, 'authorized_networks'],
    [42, 'authorized_networks'],
    [true, 'authorized_networks'],
    [['10.0.0.0/8', 42], 'authorized_networks.1'],
    [[null], 'authorized_networks.0'],
    [[['10.0.0.0/8']], 'authorized_networks.0'],
    [[{ cidr: '10.0.0.0/8' }], 'authorized_networks.0'],
  ])(
    'refuses %j (not an array of strings) with 400, field %s, as any other ill-typed field',
    async (networks, field) => {
      const res = await app.client.request('PUT', '/v1/clusters/demo', body(networks));
      expect(res.status).toBe(400);
      expect(res.body).toMatchObject({ error: 'invalid_request', field, reason: 'invalid_type' });
      expect(app.store.list()).toEqual([]);
    },
  );

  it('checks the list only for a routed cluster, as it does the host', async () => {
    const res = await app.client.request('PUT', '/v1/clusters/demo', {
      ...body(['10.0.0.5/24']),
      public_access_mode: 'private',
    });
    expect(res.status).toBe(202);
    expect(app.store.list()).toEqual([]);
  });

  describe('the full set (PUT /v1/clusters)', () => {
    const item = (name: string, networks?: unknown) => ({
      name,
      ...body(networks, `api.${name}.example.com`),
    });

    it('stores every list canonical, and refuses the whole set for one bad entry, storing nothing of it', async () => {
      const ok = await app.client.request('PUT', '/v1/clusters', {
        clusters: [item('a', ['10.1.0.0/16', '10.0.0.0/16']), item('b'), item('c', [])],
      });
      expect(ok).toMatchObject({ status: 202, body: { clusters: 3, removed: [] } });
      expect(app.store.list().map((r) => [r.name, r.authorizedNetworks])).toEqual([
        ['a', ['10.0.0.0/16', '10.1.0.0/16']],
        ['b', undefined],
        ['c', undefined],
      ]);
      const before = { memory: app.store.list(), disk: await onDisk(), journal: journalText() };
      const bad = await app.client.request('PUT', '/v1/clusters', {
        clusters: [
          item('a', ['192.168.0.0/16']),
          item('d', ['10.0.0.0/8']),
          item('e', ['::1', '2001:db8::1/64']),
        ],
      });
      expect(bad.status).toBe(422);
      expect(bad.body).toMatchObject({
        field: 'clusters.2.authorized_networks.1',
        reason: 'network_host_bits_set',
        detail: expect.stringContaining('2001:db8::/64'),
      });
      expect(app.store.list()).toEqual(before.memory);
      expect(await onDisk()).toEqual(before.disk);
      expect(journalText()).toBe(before.journal);
      const typed = await app.client.request('PUT', '/v1/clusters', { clusters: [item('a', [1])] });
      expect(typed).toMatchObject({ status: 400, body: { field: 'clusters.0.authorized_networks.0' } });
    });

    it('writes nothing when a list only changed order or spelling', async () => {
      await app.client.request('PUT', '/v1/clusters', {
        clusters: [item('a', ['10.1.0.0/16', '2001:db8::/32', '10.0.0.0/16'])],
      });
      const stored = app.store.get('a');
      const journal = journalText();
      const res = await app.client.request('PUT', '/v1/clusters', {
        clusters: [item('a', ['2001:DB8:0::/32', '10.0.0.0/16', '10.1.0.0/16'])],
      });
      expect(res.status).toBe(202);
      // The same object: not even a new version (updatedAt), so no pass re-plans it.
      expect(app.store.get('a')).toBe(stored);
      expect(journalText()).toBe(journal);
      // A real change to the list is a new version.
      await app.client.request('PUT', '/v1/clusters', { clusters: [item('a', ['10.0.0.0/16'])] });
      expect(app.store.get('a')?.authorizedNetworks).toEqual(['10.0.0.0/16']);
      expect(app.store.get('a')?.updatedAt).toBeGreaterThan(stored?.updatedAt ?? 0);
      await app.client.request('PUT', '/v1/clusters', { clusters: [item('a')] });
      expect(app.store.get('a')).not.toHaveProperty('authorizedNetworks');
    });
  });

  it('keeps lists across a restart, from the journal and from a snapshot', async () => {
    await app.client.request('PUT', '/v1/clusters/demo', body(['2001:db8::/32', '10.0.0.0/8']));
    await app.client.request('PUT', '/v1/clusters/open', body(undefined, 'api.open.example.com'));
    const dir = app.dir;
    const restarted = await ClusterStore.open(join(dir, 'state.json'));
    expect(restarted.get('demo')?.authorizedNetworks).toEqual(['10.0.0.0/8', '2001:db8::/32']);
    expect(restarted.list()).toEqual(app.store.list());
  });
});

describe('the OpenAPI document describes authorized_networks', () => {
  let app: WebhookApp;
  beforeEach(async () => {
    app = await startWebhookApp();
  });
  afterEach(async () => {
    await app.stop();
  });

  it('in both request bodies and in the status, and what it answers matches it', async () => {
    // biome-ignore lint/suspicious/noExplicitAny: the document is read as plain JSON
    const doc: any = await (await fetch(`${app.base}/openapi.json`)).json();
    const ajv = new Ajv2020({ strict: false, allErrors: true });
    addFormats.default(ajv);
    const one = doc.paths['/v1/clusters/{name}'].put.requestBody.content['application/json'].schema;
    const set = doc.paths['/v1/clusters'].put.requestBody.content['application/json'].schema;
    const status = doc.paths['/v1/clusters/{name}'].get.responses['200'].content['application/json'].schema;
    const list = doc.paths['/v1/clusters'].get.responses['200'].content['application/json'].schema;
    const checkOne = ajv.compile(one);
    const checkSet = ajv.compile(set);
    const checkStatus = ajv.compile(status);
    const checkList = ajv.compile(list);
    const field = one.properties.authorized_networks;
    expect(JSON.stringify(field)).toContain('"maxItems":64');
    expect(field.description).toMatch(/network_host_bits_set/);
    expect(doc.paths['/v1/clusters/{name}'].put.responses['422'].description).toMatch(/too_many_networks/);
    expect(status.required).toContain('authorized_networks');

    for (const networks of [undefined, null, [], ['10.0.0.0/8', '2001:db8::/32', '198.51.100.7', '::1']])
      expect(checkOne(body(networks)), JSON.stringify(checkOne.errors)).toBe(true);
    for (const networks of [
      '10.0.0.0/8',
      [1],
      ['a b'],
      ['10.0.0.0/33'],
      ['010.0.0.1'],
      Array(65).fill('::1'),
    ])
      expect(checkOne(body(networks)), JSON.stringify(networks)).toBe(false);
    expect(checkSet({ clusters: [{ name: 'a', ...body(['10.0.0.0/8']) }] })).toBe(true);

    await app.client.request('PUT', '/v1/clusters/demo', body(['10.0.0.0/8', '2001:db8::/32']));
    await app.client.request('PUT', '/v1/clusters/open', body(undefined, 'api.open.example.com'));
    await app.client.request('POST', '/v1/reconcile?wait=true');
    const got = await app.client.request('GET', '/v1/clusters/demo');
    expect(checkStatus(got.body), JSON.stringify(checkStatus.errors)).toBe(true);
    const all = await app.client.request('GET', '/v1/clusters');
    expect(checkList(all.body), JSON.stringify(checkList.errors)).toBe(true);
  });

  it(
    "has a pattern that every entry parseNetwork takes matches (the CRD's too)",
    () => {
      const pattern = new RegExp(NETWORK_PATTERN);
      // biome-ignore lint/suspicious/noExplicitAny: the manifest is read as plain YAML
      const [crd]: any[] = loadAllYaml(readFileSync(CRD_FILE, 'utf8'));
      const networks =
        crd.spec.versions[0].schema.openAPIV3Schema.properties.spec.properties.authorizedNetworks;
      expect(networks).toMatchObject({ type: 'array', maxItems: MAX_AUTHORIZED_NETWORKS });
      expect(networks.items).toMatchObject({ maxLength: MAX_NETWORK_LENGTH, pattern: NETWORK_PATTERN });
      const word = fc.oneof(fc.constant(0), fc.integer({ min: 0, max: 0xffff }));
      const v6 = fc
        .tuple(fc.array(word, { minLength: 8, maxLength: 8 }), fc.integer({ min: 0, max: 128 }), fc.boolean())
        .map(([w, p, upper]) => {
          const bits = w.reduce((n, x) => (n << 16n) | BigInt(x), 0n) & ~((1n << BigInt(128 - p)) - 1n);
          const text = formatNetwork({ family: 6, bits, prefix: p });
          return upper ? text.toUpperCase() : text;
        });
      const v4 = fc
        .tuple(fc.ipV4(), fc.integer({ min: 0, max: 32 }), fc.boolean())
        .map(([a, p, bare]) => (bare ? a : `${a}/${p}`));
      fc.assert(
        fc.property(fc.oneof(v4, v6, fc.ipV6(), fc.string({ maxLength: 50 })), (entry) => {
          if (parseNetwork(entry).ok) expect(pattern.test(entry), entry).toBe(true);
        }),
        { numRuns: 5000, seed: 20261204 },
      );
      for (const bad of [
        '',
        'example.com',
        '10.0.0.0/33',
        '010.0.0.1',
        '10.0.0.0/08',
        '::/129',
        'a b',
        '1.2.3.4.5',
      ])
        expect(pattern.test(bad), bad).toBe(false);
    },
    PROPERTY_TIMEOUT_MS,
  );
});
