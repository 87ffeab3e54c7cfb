import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freeLoopbackPort } from '../support/ports.js';
import { waitFor } from '../support/wait.js';
import { signedClient } from '../support/webhook-client.js';
import { CLI, REPO, runProgram, startProgram } from './built.js';

// The built command line (dist/cli/main.js, as the package's bin and the image run it), spawned as a user
// or a container runtime would: exit codes, output streams, signals.

const SECRET = 'e2e-cli-secret-0123456789';
let dir: string;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'kubebyon-e2e-cli-'));
});
afterAll(() => {
  rmSync(dir, { recursive: true, force: true });
});

const cli = (args: string[], env: NodeJS.ProcessEnv = {}) =>
  runProgram(CLI, args, { env: { PATH: process.env.PATH, ...env } });

describe('built CLI', () => {
  it('runs as an executable with a node shebang, and answers --help with 0', async () => {
    const r = await cli(['--help']);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/^usage: kubebyon-haproxy-adapter <command>/);
    for (const c of ['serve', 'plan', 'apply', 'status', 'render'])
      expect((await cli([c, '--help'])).code, c).toBe(0);
  });

  it('refuses unknown commands and flags with usage on stderr and exit 64', async () => {
    for (const args of [['serv'], ['plan', '--detailed-exitcode'], ['status', 'extra'], []]) {
      const r = await cli(args);
      expect(r.code, args.join(' ')).toBe(64);
      expect(r.stderr).toMatch(/usage: kubebyon-haproxy-adapter/);
      expect(r.stdout).toBe('');
    }
  });

  it('render: 0 with the plan on stdout; 1 naming a bad variable; a retired one is ignored', async () => {
    const ok = await cli(['render', join(REPO, 'examples/clusters.json')]);
    expect(ok.code).toBe(0);
    expect(ok.stdout).toMatch(/^\+ frontend kubebyon_sni bind \*:443 /m);
    const bad = await cli(['render', join(REPO, 'examples/clusters.json')], {
      KUBEBYON_HAPROXY_INSPECT_DELAY_MS: 'soon',
    });
    expect(bad.code).toBe(1);
    expect(bad.stderr).toMatch(/KUBEBYON_HAPROXY_INSPECT_DELAY_MS/);
    // Retired settings are no longer read, whatever they hold (even what an earlier release refused).
    const retired = await cli(['render', join(REPO, 'examples/clusters.json')], {
      KUBEBYON_HAPROXY_BALANCE: 'fastest',
      KUBEBYON_HAPROXY_ROUTING: 'rules',
    });
    expect(retired.code).toBe(0);
    expect(retired.stdout).toBe(ok.stdout);
  });

  it('serve: a bad configuration exits 1 before listening, naming every bad variable', async () => {
    const port = await freeLoopbackPort();
    const r = await cli(['serve'], {
      KUBEBYON_LISTEN_ADDR: `127.0.0.1:${port}`,
      KUBEBYON_PROVIDER: 'haproxy',
      KUBEBYON_HAPROXY_MASTER_SOCKET: 'not/absolute.sock',
      KUBEBYON_RESYNC_INTERVAL_MS: '-1',
    });
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/KUBEBYON_WEBHOOK_SECRET: required/);
    expect(r.stderr).toMatch(/KUBEBYON_HAPROXY_MASTER_SOCKET: must be an absolute path/);
    expect(r.stderr).toMatch(/KUBEBYON_RESYNC_INTERVAL_MS/);
    await expect(fetch(`http://127.0.0.1:${port}/healthz`)).rejects.toThrow();
  });

  it.each(['SIGTERM', 'SIGINT'] as const)(
    'serve: starts without HAProxy, answers status, and exits 0 on %s after a graceful stop',
    async (signal) => {
      const port = await freeLoopbackPort();
      const env = {
        PATH: process.env.PATH,
        KUBEBYON_LISTEN_ADDR: `127.0.0.1:${port}`,
        KUBEBYON_STATE_FILE: join(dir, signal, 'clusters.json'),
        KUBEBYON_WEBHOOK_SECRET: SECRET,
        KUBEBYON_PROVIDER: 'haproxy',
        KUBEBYON_HAPROXY_MASTER_SOCKET: join(dir, 'no-haproxy-here.sock'),
        KUBEBYON_HAPROXY_OWNED_FILE: join(dir, 'kubebyon.cfg'),
        KUBEBYON_STATIC_NODE_ADDRESSES: '127.0.0.1',
        // HAProxy never answers, so the stored change is never applied: the grace period bounds the stop.
        KUBEBYON_SHUTDOWN_GRACE_MS: '2000',
        // A setting an earlier release read, with a value it refused: ignored, with one warning.
        KUBEBYON_RECONCILE_RETRIES: '99',
      };
      const serve = startProgram(CLI, ['serve'], env);
      try {
        await waitFor(() => serve.out.stdout.includes('"service started"'), 20_000, 'the start log line');
        const started = JSON.parse(
          serve.out.stdout.split('\n').find((l) => l.includes('"service started"')) ?? '{}',
        );
        expect(started).toMatchObject({
          provider: 'haproxy',
          haproxy: null,
          listen: `127.0.0.1:${port}`,
          clusters: 0,
        });
        expect(started.unreachable).toMatch(/no-haproxy-here\.sock/);
        const warned = serve.out.stdout.split('\n').filter((l) => l.includes('is no longer read'));
        expect(warned).toHaveLength(1);
        expect(JSON.parse(warned[0] ?? '{}')).toMatchObject({
          level: 40,
          setting: 'KUBEBYON_RECONCILE_RETRIES',
        });
        expect((await fetch(`http://127.0.0.1:${port}/healthz`)).status).toBe(200);
        // Stored even while HAProxy is away; the status command reads it back.
        const put = await signedClient(`http://127.0.0.1:${port}`, SECRET).request(
          'PUT',
          '/v1/clusters/demo',
          {
            control_plane_host: 'api.demo.example.com',
            public_access_mode: 'loadbalancer',
            node_port: 31443,
          },
        );
        expect(put.status).toBe(202);
        const status = await cli(['status', '--json'], {
          KUBEBYON_ADAPTER_URL: `http://127.0.0.1:${port}`,
          KUBEBYON_WEBHOOK_SECRET: SECRET,
        });
        expect(status.code).toBe(0);
        expect(JSON.parse(status.stdout).map((c: { name: string }) => c.name)).toEqual(['demo']);
        serve.child.kill(signal);
        expect(await serve.exited).toEqual({ code: 0, signal: null });
        expect(serve.out.stdout).toMatch(new RegExp(`"signal":"${signal}"`));
        expect(serve.out.stdout).toMatch(/"msg":"stopped"/);
      } finally {
        if (serve.child.exitCode === null && serve.child.signalCode === null) serve.child.kill('SIGKILL');
      }
    },
    60_000,
  );

  it('status: exits 1 when no service answers', async () => {
    const r = await cli(['status'], {
      KUBEBYON_ADAPTER_URL: `http://127.0.0.1:${await freeLoopbackPort()}`,
      KUBEBYON_WEBHOOK_SECRET: SECRET,
    });
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/cannot reach/);
  });

  it('plan and apply: exit 1 naming the master socket when HAProxy does not answer', async () => {
    const env = {
      KUBEBYON_PROVIDER: 'haproxy',
      KUBEBYON_HAPROXY_MASTER_SOCKET: join(dir, 'absent.sock'),
      KUBEBYON_HAPROXY_OWNED_FILE: join(dir, 'kubebyon.cfg'),
      KUBEBYON_STATE_FILE: join(dir, 'none.json'),
    };
    const clusters = join(REPO, 'test/ship/fixtures/clusters.json');
    for (const command of ['plan', 'apply']) {
      const r = await cli([command, clusters], env);
      expect(r.code, command).toBe(1);
      expect(r.stderr).toMatch(/HAProxy does not answer \(provider haproxy\): .*absent\.sock/);
    }
  });
});
