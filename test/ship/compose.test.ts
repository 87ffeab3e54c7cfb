import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freeLoopbackPort } from '../support/ports.js';
import { type NamedTlsServer, sniProbe, startNamedTlsServer } from '../support/tls.js';
import { waitFor } from '../support/wait.js';
import { type SignedClient, signedClient } from '../support/webhook-client.js';
import { REPO, runProgram } from './built.js';
import { COMPOSE_PROJECT_PREFIX } from './global-setup.js';

// compose.yaml started for real (`docker compose up --wait`): the local HAProxy 3.0 image and the adapter's
// image, host networking, loopback binds. Driven like kubebyon-api drives it, through the signed webhook,
// until TLS connections by SNI reach local TLS servers; the image's own CLI then plans and applies against
// the same HAProxy. Then `down`.

const SECRET = 'e2e-compose-secret-0123456789';
const project = `${COMPOSE_PROJECT_PREFIX}${process.pid}`;
const cluster = (host: string, nodePort: number) => ({
  control_plane_host: host,
  public_access_mode: 'loadbalancer',
  node_port: nodePort,
});

describe('compose.yaml: HAProxy and the adapter image', () => {
  let env: NodeJS.ProcessEnv;
  let sniPort: number;
  let adapterUrl: string;
  let client: SignedClient;
  const backends: NamedTlsServer[] = [];
  const compose = (args: string[], input?: string, timeoutMs = 180_000) =>
    runProgram('docker', ['compose', '-p', project, '-f', `${REPO}/compose.yaml`, ...args], {
      env,
      timeoutMs,
      ...(input === undefined ? {} : { input }),
    });
  // Until the route is there (or gone): a pass is applied before the webhook answers, but a new worker
  // takes over the listening socket a moment after the reload is confirmed.
  const reaches = (host: string, want: string | null) =>
    waitFor(() => sniProbe(sniPort, host), 15_000, `${host} to reach ${want ?? 'nothing'}`, {
      ok: (r) => (want === null ? 'failed' in r : 'reached' in r && r.reached === want),
      everyMs: 200,
    });

  beforeAll(async () => {
    sniPort = await freeLoopbackPort();
    const adapterPort = await freeLoopbackPort();
    adapterUrl = `http://127.0.0.1:${adapterPort}`;
    client = signedClient(adapterUrl, SECRET);
    backends.push(await startNamedTlsServer('alpha'), await startNamedTlsServer('beta'));
    env = {
      ...process.env,
      KUBEBYON_WEBHOOK_SECRET: SECRET,
      KUBEBYON_ADAPTER_PORT: String(adapterPort),
      KUBEBYON_SNI_PORT: String(sniPort),
    };
    const up = await compose(['up', '--detach', '--wait', '--quiet-pull']);
    if (up.code !== 0) {
      const logs = await compose(['logs', '--no-color', '--tail', '50']);
      throw new Error(`docker compose up --wait failed (${up.code}):\n${up.stderr}\n${logs.stdout}`);
    }
  }, 240_000);

  afterAll(async () => {
    await compose(['down', '--volumes', '--timeout', '10']);
    for (const b of backends) await b.close();
  }, 120_000);

  it('is up and healthy: both services report healthy, the adapter is ready', async () => {
    const ps = await compose(['ps', '--format', '{{.Service}} {{.Health}}']);
    expect(ps.stdout.split('\n').filter(Boolean).sort()).toEqual(['adapter healthy', 'haproxy healthy']);
    // Ready once the first reconcile has succeeded against HAProxy.
    const ready = await waitFor(() => fetch(`${adapterUrl}/readyz`), 20_000, 'the adapter to be ready', {
      ok: (r) => r.status === 200,
      everyMs: 250,
    });
    expect(ready.status, JSON.stringify(await ready.json())).toBe(200);
  });

  it('routes TLS by SNI to the clusters registered through the signed webhook', async () => {
    const [alpha, beta] = backends as [NamedTlsServer, NamedTlsServer];
    for (const [name, port] of [
      ['alpha', alpha.port],
      ['beta', beta.port],
    ] as const) {
      const r = await client.request(
        'PUT',
        `/v1/clusters/${name}?wait=true`,
        cluster(`api.${name}.e2e.test`, port),
      );
      expect(r.status, JSON.stringify(r.body)).toBe(200);
      expect(r.body).toMatchObject({
        state: 'applied',
        api_endpoint: `https://api.${name}.e2e.test:${sniPort}`,
      });
    }
    expect(await reaches('api.alpha.e2e.test', 'alpha')).toEqual({ reached: 'alpha' });
    expect(await reaches('API.Beta.e2e.test', 'beta')).toEqual({ reached: 'beta' });
    expect(alpha.seenServernames).toContain('api.alpha.e2e.test');
    expect('failed' in (await sniProbe(sniPort, 'api.unknown.e2e.test'))).toBe(true);
  });

  it("the image's CLI plans against the running HAProxy: nothing from the state, changes from a file", async () => {
    const fromState = await compose(['exec', '-T', 'adapter', 'node', '/app/dist/cli/main.js', 'plan']);
    expect(fromState.code, fromState.stderr).toBe(0);
    expect(fromState.stdout).toMatch(
      /^HAProxy 3\.0\.\S+ at \/run\/kubebyon\/master\.sock \(provider haproxy\)/,
    );
    expect(fromState.stdout).toMatch(/^no changes$/m);
    const [alpha] = backends as [NamedTlsServer];
    const file = JSON.stringify({
      clusters: [
        { name: 'alpha', ...cluster('api.alpha.e2e.test', alpha.port) },
        { name: 'gamma', ...cluster('api.gamma.e2e.test', alpha.port) },
      ],
    });
    const plan = await compose(
      ['exec', '-T', 'adapter', 'node', '/app/dist/cli/main.js', 'plan', '/dev/stdin', '--json'],
      file,
    );
    expect(plan.code, plan.stderr).toBe(2);
    const body = JSON.parse(plan.stdout);
    // Map routing: gamma takes a free slot and its map entry; beta's entry goes (its slot drains).
    expect(body.text).toMatch(/^\+ map \S+: api\.gamma\.e2e\.test -> kubebyon_slot_\d+ \(cluster gamma\)$/m);
    expect(body.text).toMatch(/^- map \S+: api\.beta\.e2e\.test -> kubebyon_slot_\d+$/m);
    // A plan changes nothing.
    expect(await reaches('api.beta.e2e.test', 'beta')).toEqual({ reached: 'beta' });
    const status = await compose([
      'exec',
      '-T',
      '-e',
      `KUBEBYON_ADAPTER_URL=${adapterUrl}`,
      'adapter',
      'node',
      '/app/dist/cli/main.js',
      'status',
    ]);
    expect(status.code, status.stderr).toBe(0);
    expect(status.stdout).toMatch(
      /^beta\s+api\.beta\.e2e\.test\s+applied\s+https:\/\/api\.beta\.e2e\.test:/m,
    );
  });

  it('removes a deleted cluster: its SNI stops routing, the other keeps its route', async () => {
    const r = await client.request('DELETE', '/v1/clusters/beta?wait=true');
    expect(r.status).toBe(200);
    expect('failed' in (await reaches('api.beta.e2e.test', null))).toBe(true);
    expect(await reaches('api.alpha.e2e.test', 'alpha')).toEqual({ reached: 'alpha' });
    const metrics = await (await fetch(`${adapterUrl}/metrics`)).text();
    expect(metrics).toMatch(
      /^kubebyon_haproxy_adapter_reloads_total\{result="succeeded",reason="\w+"\} [1-9]/m,
    );
  });

  it("with the service stopped, the image's CLI applies a clusters file in one pass (exit 0), then plans 0", async () => {
    expect((await compose(['stop', 'adapter'])).code).toBe(0);
    const [, beta] = backends as [NamedTlsServer, NamedTlsServer];
    const file = JSON.stringify({
      clusters: [{ name: 'gamma', ...cluster('api.gamma.e2e.test', beta.port) }],
    });
    const run = (args: string[]) => compose(['run', '--rm', '--no-deps', '-T', 'adapter', ...args], file);
    const apply = await run(['apply', '/dev/stdin']);
    expect(apply.code, apply.stderr).toBe(0);
    expect(apply.stdout).toMatch(/^applied \d+ changes$/m);
    expect(await reaches('api.gamma.e2e.test', 'beta')).toEqual({ reached: 'beta' });
    expect('failed' in (await reaches('api.alpha.e2e.test', null))).toBe(true);
    const plan = await run(['plan', '/dev/stdin']);
    expect(plan.code, plan.stderr).toBe(0);
    const bad = await compose(
      ['run', '--rm', '--no-deps', '-T', 'adapter', 'apply', '/dev/stdin'],
      JSON.stringify({ clusters: [{ name: 'ip', ...cluster('10.1.2.3', beta.port) }] }),
    );
    expect(bad.code).toBe(1);
    expect(bad.stderr).toMatch(/control_plane_host: host_is_ip_literal/);
    expect(await reaches('api.gamma.e2e.test', 'beta')).toEqual({ reached: 'beta' });
  });
});
