import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import type { TestProject } from 'vitest/node';
import { sweepTestbedContainers } from './support/haproxy-testbed.js';

/**
 * The suites that run the service as it ships: the compiled dist/, started as its own process by
 * test/support/service-process.ts. dist/ is built for them once, before their first file.
 */
const RUN_BUILT_SERVICE = new Set(['dataplaneapi', 'e2e', 'faults']);

// The one global setup of the suites with HAProxy test beds. Containers are removed by each test; the sweep
// catches those of a run that was killed midway.
export async function setup(project: TestProject): Promise<void> {
  await sweepTestbedContainers();
  if (RUN_BUILT_SERVICE.has(project.name))
    execFileSync('npm', ['run', '--silent', 'build'], {
      cwd: join(import.meta.dirname, '..'),
      stdio: 'inherit',
    });
}

export async function teardown(): Promise<void> {
  await sweepTestbedContainers();
}
