import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { NETWORKS_CELL_WIDTH, networksCell } from '../../src/cli/output.js';
import { MemoryProvider } from '../../src/providers/memory/memory-provider.js';
import { cliHarness } from '../support/cli-harness.js';
import { startWebhookApp, TEST_SECRET } from '../support/webhook-app.js';

// Authorized networks as the command line shows them: a NETWORKS column in status (only when some cluster has
// a list), every list in full in plan, apply and render, all of them in --json.

const cli = cliHarness('kubebyon-cli-networks-');
const { file } = cli;
/** Here stdout is looked at line by line. */
const run = async (...args: Parameters<typeof cli.run>) => {
  const r = await cli.run(...args);
  return { ...r, out: r.lines };
};

const cluster = (name: string, host: string, nodePort: number, networks?: string[]) => ({
  name,
  control_plane_host: host,
  public_access_mode: 'loadbalancer',
  node_port: nodePort,
  ...(networks ? { authorized_networks: networks } : {}),
});

const passEnv = () => ({
  KUBEBYON_PROVIDER: 'haproxy',
  KUBEBYON_STATE_FILE: join(cli.dir, 'state', 'clusters.json'),
  KUBEBYON_STATIC_NODE_ADDRESSES: '127.0.0.1',
  KUBEBYON_RECONCILE_RETRIES: '0',
});

describe('networksCell', () => {
  it('says open, gives a short list whole, and cuts a long one with the count of the rest', () => {
    expect(networksCell([])).toBe('open');
    expect(networksCell(['10.0.0.0/8', '2001:db8::/32'])).toBe('10.0.0.0/8,2001:db8::/32');
    const many = Array.from({ length: 20 }, (_, i) => `10.${i}.0.0/16`);
    const cell = networksCell(many);
    expect(cell).toMatch(/^10\.0\.0\.0\/16,10\.1\.0\.0\/16,.*,\+\d+$/);
    expect(cell.length).toBeLessThanOrEqual(NETWORKS_CELL_WIDTH);
    const shown = cell.split(',').slice(0, -1);
    expect(Number(cell.split('+')[1])).toBe(many.length - shown.length);
    expect(shown).toEqual(many.slice(0, shown.length));
    // One entry wider than the cell is shown whole, with the count of the rest.
    const wide = ['ffff:ffff:ffff:ffff:ffff:ffff:ffff:ff00/120', '10.0.0.0/8'];
    expect(networksCell(wide)).toBe('ffff:ffff:ffff:ffff:ffff:ffff:ffff:ff00/120,+1');
    expect(networksCell(wide.slice(0, 1))).toBe(wide[0]);
    expect(networksCell(many)).not.toMatch(/\s/);
  });
});

describe('status', () => {
  it('adds NETWORKS when some cluster has a list, and reads as before when none does', async () => {
    const app = await startWebhookApp();
    try {
      const env = { KUBEBYON_ADAPTER_URL: app.base, KUBEBYON_WEBHOOK_SECRET: TEST_SECRET };
      const put = async (name: string, networks?: string[]) => {
        const { name: _, ...body } = cluster(name, `api.${name}.example.com`, 31001, networks);
        expect((await app.client.request('PUT', `/v1/clusters/${name}?wait=true`, body)).status).toBe(200);
      };
      await put('open');
      const before = await run(['status'], env);
      expect(before.out[0]).toMatch(/^NAME\s+HOST\s+STATE\s+API ENDPOINT\s+LAST APPLIED\s+REASON$/);
      expect(before.out[1]).toMatch(/^open\s+api\.open\.example\.com\s+applied\s+\S+\s+\S+$/);
      await put('office', ['2001:db8::/32', '203.0.113.0/24']);
      const table = await run(['status'], env);
      expect(table.code).toBe(0);
      expect(table.out[0]).toMatch(/^NAME\s+HOST\s+STATE\s+API ENDPOINT\s+LAST APPLIED\s+NETWORKS\s+REASON$/);
      expect(table.out[1]).toMatch(
        /^office\s+api\.office\.example\.com\s+applied\s+\S+\s+\S+\s+203\.0\.113\.0\/24,2001:db8::\/32$/,
      );
      expect(table.out[2]).toMatch(/^open\s+api\.open\.example\.com\s+applied\s+\S+\s+\S+\s+open$/);
      const json = JSON.parse((await run(['status', '--json'], env)).out.join('\n'));
      expect(
        json.map((c: { name: string; authorized_networks: string[] }) => [c.name, c.authorized_networks]),
      ).toEqual([
        ['office', ['203.0.113.0/24', '2001:db8::/32']],
        ['open', []],
      ]);
    } finally {
      await app.stop();
    }
  });
});

describe('plan, apply and render', () => {
  it('plan and apply list every cluster in full, and --json gives each list', async () => {
    const provider = new MemoryProvider();
    const many = Array.from({ length: 10 }, (_, i) => `10.${i}.0.0/16`);
    const clusters = file('clusters.json', {
      clusters: [
        cluster('demo', 'api.demo.example.com', 30443, ['198.51.0.0/16', '::1', ...many]),
        cluster('open', 'api.open.example.com', 30444),
      ],
    });
    const plan = await run(['plan', clusters], passEnv(), { provider });
    expect(plan.code).toBe(2);
    const text = plan.out.join('\n');
    expect(text).toMatch(/^NAME\s+HOST\s+STATE\s+API ENDPOINT\s+NETWORKS\s+REASON$/m);
    expect(text).toMatch(/^demo\s+api\.demo\.example\.com\s+applied\s+\S+\s+10\.0\.0\.0\/16,.*,\+\d+$/m);
    const full = [...many, '198.51.0.0/16', '::1/128'].join(', ');
    expect(plan.out).toContain(plan.out.find((l) => /^CLUSTER\s+AUTHORIZED NETWORKS$/.test(l)));
    expect(plan.out.find((l) => l.startsWith('demo ') && l.endsWith(full))).toBeDefined();
    expect(plan.out.find((l) => /^open\s+open to all$/.test(l))).toBeDefined();
    const json = JSON.parse(
      (await run(['plan', clusters, '--json'], passEnv(), { provider })).out.join('\n'),
    );
    expect(json.clusters.map((c: { authorized_networks: string[] }) => c.authorized_networks)).toEqual([
      [...many, '198.51.0.0/16', '::1/128'],
      [],
    ]);
    const applied = await run(['apply', clusters], passEnv(), { provider });
    expect(applied.code).toBe(0);
    expect(applied.out.find((l) => l.startsWith('demo ') && l.endsWith(full))).toBeDefined();
  });

  it('plan refuses a file with a bad list as the webhook would, naming the entry', async () => {
    const provider = new MemoryProvider();
    const clusters = file('clusters.json', {
      clusters: [cluster('demo', 'api.demo.example.com', 30443, ['10.0.0.0/8', '10.0.0.5/24'])],
    });
    const r = await run(['plan', clusters], passEnv(), { provider });
    expect(r.code).toBe(1);
    expect(r.err).toMatch(/clusters\.0\.authorized_networks\.1: network_host_bits_set: .*10\.0\.0\.0\/24/);
    expect(provider.reads).toBe(0);
  });

  it('plan of open clusters prints no networks at all', async () => {
    const provider = new MemoryProvider();
    const clusters = file('clusters.json', { clusters: [cluster('open', 'api.open.example.com', 30444)] });
    const plan = await run(['plan', clusters], passEnv(), { provider });
    expect(plan.out.join('\n')).not.toMatch(/NETWORKS/);
  });

  it("render prints each accepted cluster's list, and rejects a cluster whose list is bad", async () => {
    const claims = file('claims.json', {
      clusters: [
        {
          cluster: 'demo',
          host: 'api.demo.example.com',
          endpoints: [{ address: '127.0.0.1', port: 30443 }],
          authorized_networks: ['2001:DB8::/32', '10.0.0.1'],
        },
        { cluster: 'open', host: 'api.open.example.com', endpoints: [], authorized_networks: null },
        {
          cluster: 'bad',
          host: 'api.bad.example.com',
          endpoints: [],
          authorized_networks: ['10.0.0.5/24'],
        },
      ],
    });
    const r = await run(['render', claims]);
    expect(r.code).toBe(0);
    const text = r.out.join('\n');
    expect(text).toMatch(
      /^cluster demo: accepted -> https:\/\/api\.demo\.example\.com:443\n {2}authorized networks: 10\.0\.0\.1\/32, 2001:db8::\/32$/m,
    );
    expect(text).toMatch(
      /^cluster open: degraded \(no endpoints\) -> \S+\n {2}authorized networks: open to all$/m,
    );
    expect(text).toMatch(/^cluster bad: rejected: network_host_bits_set \(.*10\.0\.0\.0\/24.*\)$/m);
    const shape = await run([
      'render',
      file('shape.json', {
        clusters: [{ cluster: 'a', host: 'a.example.com', endpoints: [], authorized_networks: '10.0.0.0/8' }],
      }),
    ]);
    expect(shape.code).toBe(1);
    expect(shape.err).toMatch(/clusters\.0\.authorized_networks/);
  });
});
