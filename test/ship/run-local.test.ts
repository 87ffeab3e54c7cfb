import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { freeLoopbackPort } from '../support/ports.js';
import { waitFor } from '../support/wait.js';
import { REPO, runProgram, startProgram } from './built.js';
import { COMPOSE_PROJECT_PREFIX } from './global-setup.js';

// README command one, as a user runs it, in its --once form: everything it starts must answer, and be gone
// after it exits.

describe('scripts/run-local.sh --once', () => {
  const dir = mkdtempSync(join(tmpdir(), 'kubebyon-run-local-'));
  const project = `${COMPOSE_PROJECT_PREFIX}${process.pid}-run-local`;
  afterAll(() => {
    rmSync(dir, { recursive: true, force: true });
  });

  it('shows both clusters answering through HAProxy by SNI, exits 0, and stops what it started', async () => {
    const ports = {
      adapter: await freeLoopbackPort(),
      sni: await freeLoopbackPort(),
      alpha: await freeLoopbackPort(),
      beta: await freeLoopbackPort(),
    };
    const r = await runProgram(join(REPO, 'scripts/run-local.sh'), ['--once'], {
      env: {
        ...process.env,
        KUBEBYON_ADAPTER_PORT: String(ports.adapter),
        KUBEBYON_SNI_PORT: String(ports.sni),
        KUBEBYON_DEMO_NODE_PORTS: `${ports.alpha} ${ports.beta}`,
        KUBEBYON_LOCAL_PROJECT: project,
        KUBEBYON_LOCAL_DIR: dir,
      },
      timeoutMs: 600_000,
    });
    expect(r.code, `${r.stdout}\n${r.stderr}`).toBe(0);
    for (const name of ['alpha', 'beta']) {
      const host = `api.${name}.kubebyon.test`;
      expect(r.stdout).toMatch(
        new RegExp(
          `^${name}\\s+${host.replaceAll('.', '\\.')}\\s+applied\\s+https://${host}:${ports.sni}\\s`,
          'm',
        ),
      );
      expect(r.stdout).toContain(
        `$ curl -sk --resolve ${host}:${ports.sni}:127.0.0.1 https://${host}:${ports.sni}/version`,
      );
      expect(r.stdout).toContain(`"gitVersion":"v1.31.0+standin-${name}"`);
      expect(r.stdout).toContain(`"sni":"${host}"`);
    }
    expect(r.stdout).toMatch(/^both clusters answered through HAProxy$/m);
    expect(r.stdout).toMatch(/^stopped$/m);
    // Nothing it started is left: no containers of its project, no stand-in or adapter listening.
    const ps = await runProgram('docker', [
      'ps',
      '-a',
      '--filter',
      `label=com.docker.compose.project=${project}`,
      '-q',
    ]);
    expect(ps.stdout.trim()).toBe('');
    for (const port of [ports.adapter, ports.sni, ports.alpha, ports.beta])
      await expect(fetch(`http://127.0.0.1:${port}/`)).rejects.toThrow();
  }, 600_000);

  it('keeps running with the commands to try, and Ctrl-C stops everything it started', async () => {
    const ports = {
      adapter: await freeLoopbackPort(),
      sni: await freeLoopbackPort(),
      alpha: await freeLoopbackPort(),
      beta: await freeLoopbackPort(),
    };
    // Its own process group, as in a terminal, so that Ctrl-C (SIGINT to the group) reaches it all.
    const run = startProgram(
      join(REPO, 'scripts/run-local.sh'),
      [],
      {
        ...process.env,
        KUBEBYON_ADAPTER_PORT: String(ports.adapter),
        KUBEBYON_SNI_PORT: String(ports.sni),
        KUBEBYON_DEMO_NODE_PORTS: `${ports.alpha} ${ports.beta}`,
        KUBEBYON_LOCAL_PROJECT: `${project}-interactive`,
        KUBEBYON_LOCAL_DIR: dir,
      },
      { detached: true },
    );
    try {
      const running = () => run.out.stdout.includes('==> running');
      // Stops waiting when the script ends early (a port in use, a failed start): its output says why.
      await waitFor(() => running() || run.child.exitCode !== null, 300_000, 'the running banner', {
        everyMs: 250,
      });
      expect(running(), `${run.out.stdout}\n${run.out.stderr}`).toBe(true);
      expect(run.out.stdout).toMatch(/node dist\/cli\/main\.js status/);
      expect(run.out.stdout).toContain(`curl -s http://127.0.0.1:${ports.adapter}/metrics`);
      expect((await fetch(`http://127.0.0.1:${ports.adapter}/healthz`)).status).toBe(200);
      process.kill(-(run.child.pid ?? 0), 'SIGINT');
      expect((await run.exited).code).toBe(130);
    } finally {
      if (run.child.exitCode === null) process.kill(-(run.child.pid ?? 0), 'SIGKILL');
    }
    expect(run.out.stdout).toMatch(/^stopped$/m);
    const ps = await runProgram('docker', [
      'ps',
      '-a',
      '--filter',
      `label=com.docker.compose.project=${project}-interactive`,
      '-q',
    ]);
    expect(ps.stdout.trim()).toBe('');
    for (const port of [ports.adapter, ports.sni, ports.alpha, ports.beta])
      await expect(fetch(`http://127.0.0.1:${port}/`)).rejects.toThrow();
  }, 600_000);
});
