import { hostname } from 'node:os';
import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../../src/config/env.js';
import { listedInstances } from '../../src/fleet/instances.js';

// The fleet's variables as `serve` reads them: several instances, the Kubernetes store, leader election.

const dataplane = { KUBEBYON_WEBHOOK_SECRET: 'a-long-enough-secret', KUBEBYON_DATAPLANE_PASSWORD: 'pw' };
const stock = { KUBEBYON_WEBHOOK_SECRET: 'a-long-enough-secret', KUBEBYON_PROVIDER: 'haproxy' };
const memory = { KUBEBYON_WEBHOOK_SECRET: 'a-long-enough-secret', KUBEBYON_PROVIDER: 'memory' };
const list = (entries: unknown[]) => JSON.stringify(entries);

/** The problems a refused configuration names (fails the test when it is accepted). */
function problemsOf(env: NodeJS.ProcessEnv): string[] {
  try {
    loadConfig(env);
  } catch (err) {
    if (err instanceof ConfigError) return err.problems;
    throw err;
  }
  throw new Error('the configuration was accepted');
}

/** Refused, with one problem naming `variable` and matching `why`. */
function expectRefused(env: NodeJS.ProcessEnv, variable: string, why: RegExp) {
  const problems = problemsOf(env);
  expect(
    problems.filter((p) => p.startsWith(`${variable}: `) && why.test(p)),
    problems.join('\n'),
  ).toHaveLength(1);
}

describe('fleet variables: valid', () => {
  it('take nothing by default: one HAProxy, the file store, no leader election', () => {
    const c = loadConfig(dataplane);
    expect(c.fleet).toMatchObject({ instances: [], store: 'file' });
    expect(c.fleet).not.toHaveProperty('discovery');
    expect(c.fleet).not.toHaveProperty('leaderElection');
    expect(listedInstances(c)).toMatchObject({ single: true, specs: [{ name: 'default' }] });
  });

  it('lists Data Plane API instances, each with its url and an optional bind', () => {
    const c = loadConfig({
      ...dataplane,
      KUBEBYON_HAPROXY_INSTANCES: list([
        { name: 'a', url: 'http://10.0.0.1:5555' },
        { name: 'b', url: 'http://10.0.0.2:5555', bind: '127.0.0.2:8443' },
      ]),
    });
    expect(c.fleet.instances).toEqual([
      { name: 'a', url: 'http://10.0.0.1:5555' },
      { name: 'b', url: 'http://10.0.0.2:5555', bind: { address: '127.0.0.2', port: 8443 } },
    ]);
    const { single, specs } = listedInstances(c);
    expect(single).toBe(false);
    expect(specs.map((s) => [s.name, s.provider.kind === 'dataplaneapi' && s.provider.url, s.bind])).toEqual([
      ['a', 'http://10.0.0.1:5555', undefined],
      ['b', 'http://10.0.0.2:5555', { address: '127.0.0.2', port: 8443 }],
    ]);
    // The shared settings stay each instance's.
    expect(specs[1]?.provider).toMatchObject({ username: 'admin', password: 'pw' });
  });

  it('lists stock HAProxy instances, each with its master socket and owned file', () => {
    const c = loadConfig({
      ...stock,
      KUBEBYON_HAPROXY_INSTANCES: list([
        { name: 'edge-1', masterSocket: '/run/edge-1.sock', ownedFile: '/etc/edge-1/kubebyon.cfg' },
        {
          name: 'edge-2',
          masterSocket: '/run/edge-2.sock',
          ownedFile: '/etc/edge-2/kubebyon.cfg',
          checkFiles: ['/etc/edge-2/haproxy.cfg'],
        },
      ]),
    });
    expect(c.fleet.instances.map((i) => i.name)).toEqual(['edge-1', 'edge-2']);
    const specs = listedInstances(c).specs;
    expect(specs[0]?.provider).toMatchObject({
      masterSocket: '/run/edge-1.sock',
      ownedFile: '/etc/edge-1/kubebyon.cfg',
      checkFiles: ['/etc/haproxy/haproxy.cfg'],
    });
    expect(specs[1]?.provider).toMatchObject({ checkFiles: ['/etc/edge-2/haproxy.cfg'] });
    expect(new Set(specs.map((s) => s.key)).size).toBe(2);
  });

  it('lists memory instances by name alone', () => {
    const c = loadConfig({ ...memory, KUBEBYON_HAPROXY_INSTANCES: list([{ name: 'a' }, { name: 'b' }]) });
    expect(c.fleet.instances).toEqual([{ name: 'a' }, { name: 'b' }]);
    expect(listedInstances(c)).toMatchObject({ single: false, specs: [{ name: 'a' }, { name: 'b' }] });
  });

  it('finds Data Plane API pods by label, in the namespace given', () => {
    const c = loadConfig({
      ...dataplane,
      KUBEBYON_HAPROXY_POD_SELECTOR: 'app.kubernetes.io/name=haproxy',
      KUBEBYON_KUBERNETES_NAMESPACE: 'edge',
    });
    expect(c.fleet.discovery).toEqual({
      namespace: 'edge',
      selector: 'app.kubernetes.io/name=haproxy',
      port: 5555,
    });
    expect(listedInstances(c)).toEqual({ single: false, specs: [] });
  });

  it('elects a leader by default with the Kubernetes store, and not when told not to', () => {
    const env = { ...dataplane, KUBEBYON_STATE_STORE: 'kubernetes', KUBEBYON_KUBERNETES_NAMESPACE: 'edge' };
    expect(loadConfig(env).fleet).toEqual({
      instances: [],
      store: 'kubernetes',
      namespace: 'edge',
      leaderElection: {
        identity: hostname(),
        leaseName: 'kubebyon-haproxy-adapter',
        leaseDurationMs: 15_000,
        renewDeadlineMs: 10_000,
        retryPeriodMs: 2_000,
        apply: 'leader',
      },
    });
    expect(
      loadConfig({ ...env, KUBEBYON_LEADER_ELECTION_ID: 'replica-0' }).fleet.leaderElection?.identity,
    ).toBe('replica-0');
    expect(loadConfig({ ...env, KUBEBYON_LEADER_ELECTION: 'false' }).fleet).not.toHaveProperty(
      'leaderElection',
    );
  });

  it('does not check the lease timing when no leader is elected', () => {
    expect(
      loadConfig({
        ...dataplane,
        KUBEBYON_LEASE_DURATION_MS: '5000',
        KUBEBYON_LEASE_RENEW_DEADLINE_MS: '9000',
      }).fleet.leaderElection,
    ).toBeUndefined();
  });
});

describe('fleet variables: each mistake is a ConfigError naming the variable', () => {
  const two = (a: object, b: object) =>
    list([
      { name: 'a', ...a },
      { name: 'b', ...b },
    ]);

  it.each([
    ['bad JSON', memory, '[{"name": "a"', /not JSON/],
    ['not a list', memory, '{"name": "a"}', /array/i],
    ['a bad name', memory, list([{ name: 'A_1' }]), /lowercase DNS label/],
    ['an unknown field', memory, list([{ name: 'a', port: 1 }]), /port/],
    ['a name given twice', memory, list([{ name: 'a' }, { name: 'a' }]), /instance a is named twice/],
    [
      'one url for two instances',
      dataplane,
      two({ url: 'http://10.0.0.1:5555' }, { url: 'http://10.0.0.1:5555' }),
      /two instances share one url/,
    ],
    [
      'one master socket for two instances',
      stock,
      two(
        { masterSocket: '/run/m.sock', ownedFile: '/etc/a.cfg' },
        { masterSocket: '/run/m.sock', ownedFile: '/etc/b.cfg' },
      ),
      /two instances share one masterSocket/,
    ],
    [
      'one owned file for two instances',
      stock,
      two(
        { masterSocket: '/run/a.sock', ownedFile: '/etc/k.cfg' },
        { masterSocket: '/run/b.sock', ownedFile: '/etc/k.cfg' },
      ),
      /two instances share one ownedFile/,
    ],
    ['no url (dataplaneapi)', dataplane, list([{ name: 'a' }]), /instance a: needs url/],
    [
      'a stock field (dataplaneapi)',
      dataplane,
      list([{ name: 'a', url: 'http://10.0.0.1:5555', ownedFile: '/etc/a.cfg' }]),
      /instance a: masterSocket, ownedFile and checkFiles are for KUBEBYON_PROVIDER=haproxy/,
    ],
    [
      'no master socket (haproxy)',
      stock,
      list([{ name: 'a', ownedFile: '/etc/a.cfg' }]),
      /instance a: needs masterSocket and ownedFile/,
    ],
    [
      'no owned file (haproxy)',
      stock,
      list([{ name: 'a', masterSocket: '/run/a.sock' }]),
      /instance a: needs masterSocket and ownedFile/,
    ],
    [
      'a url (haproxy)',
      stock,
      list([
        { name: 'a', masterSocket: '/run/a.sock', ownedFile: '/etc/a.cfg', url: 'http://10.0.0.1:5555' },
      ]),
      /instance a: url is for KUBEBYON_PROVIDER=dataplaneapi/,
    ],
    [
      'a relative owned file',
      stock,
      list([{ name: 'a', masterSocket: '/run/a.sock', ownedFile: 'a.cfg' }]),
      /absolute path/,
    ],
    [
      'a url (memory)',
      memory,
      list([{ name: 'a', url: 'http://10.0.0.1:5555' }]),
      /memory provider takes a name/,
    ],
    ['a bad bind', memory, list([{ name: 'a', bind: '10.0.0.300:443' }]), /is not an IPv4 address/],
    ['a bind without a port', memory, list([{ name: 'a', bind: '127.0.0.1' }]), /is not \[address\]:port/],
    [
      'more than 16 instances',
      memory,
      list(Array.from({ length: 17 }, (_, i) => ({ name: `i${i}` }))),
      /at most 16 instances/,
    ],
  ])('KUBEBYON_HAPROXY_INSTANCES: %s', (_what, env, value, why) => {
    expectRefused({ ...env, KUBEBYON_HAPROXY_INSTANCES: value }, 'KUBEBYON_HAPROXY_INSTANCES', why);
  });

  it('accepts exactly 16 instances', () => {
    const sixteen = list(Array.from({ length: 16 }, (_, i) => ({ name: `i${i}` })));
    expect(loadConfig({ ...memory, KUBEBYON_HAPROXY_INSTANCES: sixteen }).fleet.instances).toHaveLength(16);
  });

  it('KUBEBYON_LEADER_ELECTION: replicas need the Kubernetes store', () => {
    expectRefused(
      { ...dataplane, KUBEBYON_LEADER_ELECTION: 'true' },
      'KUBEBYON_LEADER_ELECTION',
      /KUBEBYON_STATE_STORE=kubernetes/,
    );
    expectRefused({ ...dataplane, KUBEBYON_LEADER_ELECTION: 'yes' }, 'KUBEBYON_LEADER_ELECTION', /./);
  });

  it('KUBEBYON_APPLY: always is for an HAProxy beside each replica, under a Lease', () => {
    const leads = { ...stock, KUBEBYON_STATE_STORE: 'kubernetes' };
    expect(loadConfig(leads).fleet.leaderElection?.apply).toBe('leader');
    expect(loadConfig({ ...leads, KUBEBYON_APPLY: 'always' }).fleet.leaderElection?.apply).toBe('always');
    expectRefused({ ...stock, KUBEBYON_APPLY: 'always' }, 'KUBEBYON_APPLY', /needs leader election/);
    expectRefused(
      {
        ...dataplane,
        KUBEBYON_STATE_STORE: 'kubernetes',
        KUBEBYON_APPLY: 'always',
        KUBEBYON_HAPROXY_POD_SELECTOR: 'app=haproxy',
      },
      'KUBEBYON_APPLY',
      /every replica would drive every pod/,
    );
    expectRefused({ ...leads, KUBEBYON_APPLY: 'sometimes' }, 'KUBEBYON_APPLY', /./);
  });

  it('the lease outlives the renew deadline, which outlives 1.2 retries', () => {
    const leads = { ...dataplane, KUBEBYON_STATE_STORE: 'kubernetes' };
    expectRefused(
      { ...leads, KUBEBYON_LEASE_DURATION_MS: '10000', KUBEBYON_LEASE_RENEW_DEADLINE_MS: '10000' },
      'KUBEBYON_LEASE_DURATION_MS',
      /greater than KUBEBYON_LEASE_RENEW_DEADLINE_MS/,
    );
    expectRefused(
      { ...leads, KUBEBYON_LEASE_RENEW_DEADLINE_MS: '2400', KUBEBYON_LEASE_RETRY_PERIOD_MS: '2000' },
      'KUBEBYON_LEASE_RENEW_DEADLINE_MS',
      /greater than 1\.2 × KUBEBYON_LEASE_RETRY_PERIOD_MS/,
    );
    // Just past the rule: accepted.
    expect(
      loadConfig({
        ...leads,
        KUBEBYON_LEASE_RENEW_DEADLINE_MS: '2401',
        KUBEBYON_LEASE_RETRY_PERIOD_MS: '2000',
      }).fleet.leaderElection,
    ).toMatchObject({ renewDeadlineMs: 2401, retryPeriodMs: 2000 });
    expectRefused({ ...leads, KUBEBYON_LEASE_DURATION_MS: '999' }, 'KUBEBYON_LEASE_DURATION_MS', /./);
  });

  it('KUBEBYON_HAPROXY_POD_SELECTOR: not with a list of instances, and for the Data Plane API only', () => {
    expectRefused(
      {
        ...dataplane,
        KUBEBYON_HAPROXY_POD_SELECTOR: 'app=haproxy',
        KUBEBYON_HAPROXY_INSTANCES: list([{ name: 'a', url: 'http://10.0.0.1:5555' }]),
      },
      'KUBEBYON_HAPROXY_POD_SELECTOR',
      /either it or KUBEBYON_HAPROXY_INSTANCES/,
    );
    expectRefused(
      { ...stock, KUBEBYON_HAPROXY_POD_SELECTOR: 'app=haproxy' },
      'KUBEBYON_HAPROXY_POD_SELECTOR',
      /Data Plane API only/,
    );
  });

  it('names the store and namespace variables', () => {
    expectRefused({ ...dataplane, KUBEBYON_STATE_STORE: 'etcd' }, 'KUBEBYON_STATE_STORE', /./);
    expectRefused(
      { ...dataplane, KUBEBYON_KUBERNETES_NAMESPACE: 'Edge' },
      'KUBEBYON_KUBERNETES_NAMESPACE',
      /namespace name/,
    );
  });

  it('names every problem at once, the fleet`s with the others', () => {
    const problems = problemsOf({
      KUBEBYON_PROVIDER: 'memory',
      KUBEBYON_HAPROXY_INSTANCES: list([{ name: 'a' }, { name: 'a' }]),
    });
    expect(problems.some((p) => p.startsWith('KUBEBYON_WEBHOOK_SECRET: '))).toBe(true);
    expect(problems.some((p) => p.startsWith('KUBEBYON_HAPROXY_INSTANCES: '))).toBe(true);
  });
});
