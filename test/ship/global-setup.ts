import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { alive } from '../support/pid.js';
import { REPO } from './built.js';

const run = promisify(execFile);

/** Compose projects of the e2e suite are named with this prefix and the pid of the run that started them. */
export const COMPOSE_PROJECT_PREFIX = 'kubebyon-ship-';

/** Removes compose projects left by e2e runs that died before their `down` (runs still alive are spared). */
async function sweepComposeProjects(): Promise<void> {
  const { stdout } = await run('docker', ['compose', 'ls', '--all', '--format', 'json']);
  const projects = (JSON.parse(stdout || '[]') as Array<{ Name: string }>).map((p) => p.Name);
  for (const name of projects) {
    if (!name.startsWith(COMPOSE_PROJECT_PREFIX)) continue;
    const pid = /^([0-9]+)/.exec(name.slice(COMPOSE_PROJECT_PREFIX.length))?.[1];
    if (pid && alive(Number(pid))) continue;
    await run('docker', ['compose', '-p', name, 'down', '--volumes', '--timeout', '5'], {
      cwd: REPO,
      env: { ...process.env, KUBEBYON_WEBHOOK_SECRET: 'unused-by-down-0000' },
    });
  }
}

// The suite runs what ships: dist/ and the image are (re)built here when the sources changed (cached by
// fingerprint), so that a test never runs a stale build.
export async function setup(): Promise<void> {
  await run(`${REPO}/scripts/build-testbed-images.sh`, ['3.0'], { cwd: REPO });
  await run(`${REPO}/scripts/build-adapter-image.sh`, [], { cwd: REPO, maxBuffer: 64 * 1024 * 1024 });
  await sweepComposeProjects();
}

export async function teardown(): Promise<void> {
  await sweepComposeProjects();
}
