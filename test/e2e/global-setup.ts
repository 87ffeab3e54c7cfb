import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { sweepTestbedContainers } from '../support/haproxy-testbed.js';

// The suite runs the service as it ships: the compiled dist/, started as its own process.
export async function setup(): Promise<void> {
  await sweepTestbedContainers();
  execFileSync('npm', ['run', '--silent', 'build'], {
    cwd: join(import.meta.dirname, '../..'),
    stdio: 'inherit',
  });
}

export async function teardown(): Promise<void> {
  await sweepTestbedContainers();
}
