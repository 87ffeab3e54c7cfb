import { sweepTestbedContainers } from './support/haproxy-testbed.js';

// Containers are removed by each test; this sweep catches those of a run that was killed midway.
export async function setup(): Promise<void> {
  await sweepTestbedContainers();
}

export async function teardown(): Promise<void> {
  await sweepTestbedContainers();
}
