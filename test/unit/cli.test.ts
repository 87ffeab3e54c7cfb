import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { EXIT_USAGE } from '../../src/cli/main.js';
import { MemoryProvider } from '../../src/providers/memory/memory-provider.js';
import { ClusterStore } from '../../src/store/cluster-store.js';
import { cliHarness } from '../support/cli-harness.js';
import { routedHosts } from '../support/owner.js';

// The command line as a user meets it: exit codes, what goes to stdout and stderr, and that a refused input
// changes nothing. HAProxy is the strict in-memory provider; the built CLI is run in test/e2e.

const cli = cliHarness('kubebyon-cli-');
const { file } = cli;
const run = cli.run;

const cluster = (name: string, host: string, nodePort: number) => ({
  name,
  control_plane_host: host,
  public_access_mode: 'loadbalancer',
  node_port: nodePort,
});

// The stock provider's variables need no secret; the provider itself is replaced by the memory provider.
const passEnv = () => ({
  KUBEBYON_PROVIDER: 'haproxy',
  KUBEBYON_STATE_FILE: join(cli.dir, 'state', 'clusters.json'),
  KUBEBYON_STATIC_NODE_ADDRESSES: '127.0.0.1,127.0.0.2',
  KUBEBYON_RECONCILE_RETRIES: '0',
});

describe('command line: usage', () => {
  it('lists the commands on --help and exits 0', async () => {
    const r = await run(['--help']);
    expect(r.code).toBe(0);
    for (const c of ['serve', 'plan', 'apply', 'status', 'render'])
      expect(r.out).toMatch(new RegExp(`^  ${c}`, 'm'));
  });

  it.each(['serve', 'plan', 'apply', 'status', 'render'])(
    'describes %s on --help and -h, and exits 0',
    async (c) => {
      for (const flag of ['--help', '-h']) {
        const r = await run([c, flag]);
        expect(r.code).toBe(0);
        expect(r.out).toMatch(new RegExp(`^usage: kubebyon-haproxy-adapter ${c}`));
        expect(r.out).toMatch(/Exit: 0/);
      }
    },
  );

  it('refuses no command, an unknown command, an unknown flag and extra arguments with usage (64)', async () => {
    const none = await run([]);
    expect(none.code).toBe(EXIT_USAGE);
    expect(none.err).toMatch(/a command is required\nusage:/);
    const unknown = await run(['deploy']);
    expect(unknown.code).toBe(EXIT_USAGE);
    expect(unknown.err).toMatch(/unknown command: deploy/);
    expect((await run(['toString'])).code).toBe(EXIT_USAGE);
    const flag = await run(['plan', '--detailed']);
    expect(flag.code).toBe(EXIT_USAGE);
    expect(flag.err).toMatch(/Unknown option '--detailed'[\s\S]*usage: kubebyon-haproxy-adapter plan/);
    expect((await run(['serve', 'now'])).err).toMatch(/unexpected argument: now/);
    expect((await run(['status', '--json=yes'])).code).toBe(EXIT_USAGE);
    const missing = await run(['render']);
    expect(missing.code).toBe(EXIT_USAGE);
    expect(missing.err).toMatch(/render: missing argument/);
    expect((await run(['apply', 'a.json', 'b.json'])).code).toBe(EXIT_USAGE);
  });
});

describe('command line: serve', () => {
  it('exits 1 on a bad configuration, naming every bad variable, before starting anything', async () => {
    const r = await run(['serve'], { KUBEBYON_LISTEN_ADDR: 'nowhere', KUBEBYON_PROVIDER: 'haproxy' });
    expect(r.code).toBe(1);
    expect(r.err).toMatch(/KUBEBYON_LISTEN_ADDR/);
    expect(r.err).toMatch(/KUBEBYON_WEBHOOK_SECRET: required/);
    expect(r.out).toBe('');
  });
});

describe('command line: render', () => {
  const claims = () =>
    file('claims.json', {
      clusters: [
        { cluster: 'demo', host: 'API.demo.example.com', endpoints: [{ address: '127.0.0.1', port: 30443 }] },
        { cluster: 'by-ip', host: '10.0.0.1', endpoints: [] },
      ],
    });

  it('prints each cluster and the plan for an empty HAProxy, with the configured settings', async () => {
    const r = await run(['render', claims()], {
      KUBEBYON_HAPROXY_BIND_ADDR: '127.0.0.1:8443',
      KUBEBYON_PUBLIC_PORT: '8443',
    });
    expect(r.code).toBe(0);
    expect(r.out).toMatch(/^cluster demo: accepted -> https:\/\/api\.demo\.example\.com:8443$/m);
    expect(r.out).toMatch(/^cluster by-ip: rejected: host_is_ip_literal/m);
    expect(r.out).toMatch(/^\+ frontend kubebyon_sni bind 127\.0\.0\.1:8443 /m);
    expect(r.out).toMatch(/^\+ backend kubebyon_slot_00001 \(slot\) balance leastconn$/m);
    expect(r.err).toBe('');
  });

  it('shows host -> backend -> servers after the plan: with map routing, the slot each host takes', async () => {
    const map = await run(['render', claims()]);
    expect(map.code).toBe(0);
    expect(map.out).toMatch(/^\+ map \S+: api\.demo\.example\.com -> kubebyon_slot_00001 \(cluster demo\)$/m);
    expect(map.out).toMatch(
      /\n\nHOST\s+BACKEND\s+SERVERS\napi\.demo\.example\.com\s+kubebyon_slot_00001\s+127\.0\.0\.1:30443$/,
    );
  });

  it('checks the variables it uses like the service does, and names each bad one', async () => {
    const r = await run(['render', claims()], {
      KUBEBYON_HAPROXY_BIND_ADDR: '127.0.0.1:99999',
      KUBEBYON_HAPROXY_NAME_PREFIX: 'Bad Prefix',
      KUBEBYON_HAPROXY_DEFAULT_BACKEND: 'x y',
    });
    expect(r.code).toBe(1);
    expect(r.err).toMatch(/KUBEBYON_HAPROXY_BIND_ADDR/);
    expect(r.err).toMatch(/KUBEBYON_HAPROXY_NAME_PREFIX/);
    expect(r.err).toMatch(/KUBEBYON_HAPROXY_DEFAULT_BACKEND/);
    expect(r.out).toBe('');
  });

  it('exits 1 for a missing file, a file that is not JSON and one of the wrong shape', async () => {
    expect((await run(['render', join(cli.dir, 'absent.json')])).err).toMatch(/cannot read/);
    const notJson = await run(['render', file('bad.json', '{"clusters": [')]);
    expect(notJson.code).toBe(1);
    expect(notJson.err).toMatch(/not JSON/);
    const shape = await run(['render', file('shape.json', { clusters: [{ cluster: 'a', host: 1 }] })]);
    expect(shape.code).toBe(1);
    expect(shape.err).toMatch(/clusters\.0\.host/);
  });
});

describe('command line: plan and apply', () => {
  it('plan exits 2 with the changes, apply makes them, then plan exits 0', async () => {
    const provider = new MemoryProvider();
    const clusters = file('clusters.json', {
      clusters: [
        cluster('demo', 'api.demo.example.com', 30443),
        cluster('other', 'api.other.example.com', 31443),
      ],
    });
    const before = await run(['plan', clusters], passEnv(), { provider });
    expect(before.code).toBe(2);
    expect(before.out).toMatch(/^memory at memory \(provider memory\); clusters from .*clusters\.json$/m);
    expect(before.out).toMatch(/^\+ server kubebyon_slot_\d+\/srv2 127\.0\.0\.2:30443 check$/m);
    expect(before.out).toMatch(/^\d+ changes$/m);
    expect(before.out).toMatch(
      /^demo\s+api\.demo\.example\.com\s+applied\s+https:\/\/api\.demo\.example\.com:443$/m,
    );
    expect(provider.applies).toHaveLength(0);

    const applied = await run(['apply', clusters], passEnv(), { provider });
    expect(applied.code).toBe(0);
    expect(applied.out).toMatch(/^applied \d+ changes$/m);
    expect(applied.out).toMatch(
      /^other\s+api\.other\.example\.com\s+applied\s+https:\/\/api\.other\.example\.com:443\s+\d{4}-/m,
    );
    expect(routedHosts(provider.state)).toEqual(['api.demo.example.com', 'api.other.example.com']);

    const after = await run(['plan', clusters], passEnv(), { provider });
    expect(after.code).toBe(0);
    expect(after.out).toMatch(/^no changes$/m);
    const again = await run(['apply', clusters], passEnv(), { provider });
    expect(again.code).toBe(0);
    expect(again.out).toMatch(/^nothing to apply$/m);
    expect(provider.applies).toHaveLength(1);
  });

  it('plan and apply show the slot each host takes with map routing, in the table and in JSON', async () => {
    const provider = new MemoryProvider();
    const env = { ...passEnv(), KUBEBYON_HAPROXY_ROUTING: 'map' };
    const clusters = file('clusters.json', { clusters: [cluster('demo', 'api.demo.example.com', 30443)] });
    const routed = /^api\.demo\.example\.com\s+kubebyon_slot_00001\s+127\.0\.0\.1:30443,127\.0\.0\.2:30443$/m;
    const plan = await run(['plan', clusters], env, { provider });
    expect(plan.code).toBe(2);
    expect(plan.out).toMatch(/^HOST\s+BACKEND\s+SERVERS$/m);
    expect(plan.out).toMatch(routed);
    expect(provider.reads).toBe(1);
    const json = JSON.parse((await run(['plan', clusters, '--json'], env, { provider })).out);
    expect(json.clusters).toEqual([
      expect.objectContaining({
        name: 'demo',
        backend: 'kubebyon_slot_00001',
        servers: ['127.0.0.1:30443', '127.0.0.2:30443'],
      }),
    ]);
    const applied = await run(['apply', clusters], env, { provider });
    expect(applied.code).toBe(0);
    expect(applied.out).toMatch(routed);
    expect(provider.state.maps?.[0]?.entries.get('api.demo.example.com')).toBe('kubebyon_slot_00001');
    // A pass run by hand knows nothing of HAProxy beforehand: it reads everything.
    expect(provider.reads).toBeGreaterThan(2);
  });

  it('plan --json gives the operations and each cluster, and nothing else on stdout', async () => {
    const provider = new MemoryProvider();
    const clusters = file('clusters.json', {
      clusters: [
        cluster('demo', 'api.demo.example.com', 30443),
        cluster('late', 'API.demo.example.com', 30444),
      ],
    });
    const r = await run(
      ['plan', clusters, '--json'],
      { ...passEnv(), KUBEBYON_PUBLIC_PORT: '8443' },
      { provider },
    );
    expect(r.code).toBe(2);
    const body = JSON.parse(r.out);
    expect(body.changes).toBe(body.operations.length);
    expect(body.operations.map((o: { kind: string }) => o.kind)).toContain('create_backend');
    expect(body.clusters).toEqual([
      expect.objectContaining({
        name: 'demo',
        state: 'applied',
        api_endpoint: 'https://api.demo.example.com:8443',
      }),
      expect.objectContaining({
        name: 'late',
        state: 'rejected',
        reason: expect.stringMatching(/^host_claimed/),
      }),
    ]);
  });

  it('refuses a file the webhook would refuse, naming the field, without reading HAProxy', async () => {
    const provider = new MemoryProvider();
    const cases: Array<[unknown, RegExp]> = [
      [
        { clusters: [cluster('ip', '10.0.0.1', 30443)] },
        /clusters\.0\.control_plane_host: host_is_ip_literal/,
      ],
      [{ clusters: [cluster('a', 'a.example.com', 70000)] }, /clusters\.0\.node_port: /],
      [
        { clusters: [cluster('a', 'a.example.com', 1), cluster('a', 'b.example.com', 2)] },
        /clusters\.1\.name: duplicate_name/,
      ],
      [{ clusters: [{ ...cluster('a', 'a.example.com', 1), extra: true }] }, /clusters\.0\.extra: /],
      [
        { clusters: [cluster('a', 'x.example.com }\nbackend evil', 1)] },
        /control_plane_host: host_invalid_characters/,
      ],
      [[], /: Invalid input/],
    ];
    for (const [content, error] of cases) {
      for (const command of ['plan', 'apply']) {
        const r = await run([command, file('bad.json', content)], passEnv(), { provider });
        expect(r.code, `${command} ${JSON.stringify(content)}`).toBe(1);
        expect(r.err).toMatch(error);
      }
    }
    expect(provider.reads).toBe(0);
    expect(provider.applies).toHaveLength(0);
  });

  it('plans from the state file when no file is given, and refuses a missing state file', async () => {
    const provider = new MemoryProvider();
    const env = passEnv();
    const missing = await run(['apply'], env, { provider });
    expect(missing.code).toBe(1);
    expect(missing.err).toMatch(/no state file at .*KUBEBYON_STATE_FILE/);
    const store = await ClusterStore.open(env.KUBEBYON_STATE_FILE);
    await store.upsert({ name: 'kept', host: 'kept.example.com', target: { nodePort: 32000 } });
    const r = await run(['plan'], env, { provider });
    expect(r.code).toBe(2);
    expect(r.out).toMatch(/clusters from the state file .*clusters\.json/);
    expect(r.out).toMatch(/^\+ server kubebyon_slot_\d+\/srv1 127\.0\.0\.1:32000 check$/m);
    expect((await run(['apply'], env, { provider })).code).toBe(0);
    expect(routedHosts(provider.state)).toEqual(['kept.example.com']);
  });

  it('exits 1 with the reason when HAProxy cannot be reached or the pass fails, changing nothing', async () => {
    const clusters = file('clusters.json', { clusters: [cluster('demo', 'api.demo.example.com', 30443)] });
    const down = new MemoryProvider();
    down.down = new Error('connect ECONNREFUSED /run/haproxy-master.sock');
    for (const command of ['plan', 'apply']) {
      const r = await run([command, clusters], passEnv(), { provider: down });
      expect(r.code).toBe(1);
      expect(r.err).toMatch(/HAProxy does not answer \(provider memory\): connect ECONNREFUSED/);
    }
    const failing = new MemoryProvider();
    failing.failures.push(new Error('reload failed: cannot bind socket'));
    const r = await run(['apply', clusters], passEnv(), { provider: failing });
    expect(r.code).toBe(1);
    expect(r.err).toMatch(
      /apply: failed \(what ran at runtime before the failure stays; [^)]*\): reload failed: cannot bind socket/,
    );
    expect(r.out).toMatch(/^demo\s+api\.demo\.example\.com\s+error\s+-\s+-\s+reload failed/m);
    expect(failing.state).toEqual({ frontends: [], backends: [] });
  });

  it('exits 1 when a foreign frontend holds our name: a pass would fail', async () => {
    const provider = new MemoryProvider({
      frontends: [
        {
          name: 'kubebyon_sni',
          bind: { address: '*', port: 443 },
          inspectDelayMs: 5000,
          defaultBackend: null,
          acceptsTlsHello: true,
          rules: [],
          tags: {},
        },
      ],
      backends: [],
    });
    const clusters = file('clusters.json', { clusters: [cluster('demo', 'api.demo.example.com', 30443)] });
    const plan = await run(['plan', clusters], passEnv(), { provider });
    expect(plan.code).toBe(1);
    expect(plan.err).toMatch(/a pass would fail: frontend_not_owned/);
    expect((await run(['apply', clusters], passEnv(), { provider })).code).toBe(1);
    expect(provider.state.frontends[0]?.tags).toEqual({});
  });

  it('names every bad variable and needs no webhook secret', async () => {
    const clusters = file('clusters.json', { clusters: [] });
    const r = await run(['plan', clusters], {
      ...passEnv(),
      KUBEBYON_HAPROXY_MASTER_SOCKET: 'relative.sock',
    });
    expect(r.code).toBe(1);
    expect(r.err).toMatch(/KUBEBYON_HAPROXY_MASTER_SOCKET: must be an absolute path/);
    expect(r.err).not.toMatch(/WEBHOOK/);
    const dataplane = await run(['apply', clusters], { KUBEBYON_STATE_FILE: join(cli.dir, 'x.json') });
    expect(dataplane.code).toBe(1);
    expect(dataplane.err).toMatch(/KUBEBYON_DATAPLANE_PASSWORD: required/);
  });
});
