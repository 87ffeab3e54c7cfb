import { defineConfig } from 'vitest/config';

/**
 * What every suite with containers shares: the one global setup (it sweeps test beds a killed run left, and
 * builds dist/ for the suites that run the service as it ships), one file at a time (containers share two
 * cores and host ports), and Testcontainers without its reaper, reaching containers on localhost.
 */
const withContainers = {
  globalSetup: ['test/global-setup.ts'],
  fileParallelism: false,
  env: {
    TESTCONTAINERS_RYUK_DISABLED: 'true',
    TESTCONTAINERS_HOST_OVERRIDE: 'localhost',
  },
};

export default defineConfig({
  test: {
    projects: [
      {
        test: {
          name: 'unit',
          include: ['test/unit/**/*.test.ts'],
          // Generous: a slower or busier machine than the one that wrote a test must not fail it by the clock
          // (property tests, sized by work, carry their own longer timeout: test/support/property.ts).
          testTimeout: 30_000,
        },
      },
      {
        test: {
          name: 'kubernetes',
          include: ['test/kubernetes/**/*.test.ts'],
          fileParallelism: false,
          testTimeout: 60_000,
          hookTimeout: 300_000,
        },
      },
      {
        test: {
          ...withContainers,
          name: 'integration',
          include: ['test/integration/**/*.test.ts'],
          testTimeout: 60_000,
          hookTimeout: 90_000,
        },
      },
      {
        test: {
          ...withContainers,
          name: 'dataplaneapi',
          include: ['test/dataplaneapi/**/*.test.ts'],
          testTimeout: 120_000,
          hookTimeout: 180_000,
        },
      },
      {
        test: {
          ...withContainers,
          name: 'e2e',
          include: ['test/e2e/**/*.test.ts'],
          testTimeout: 60_000,
          hookTimeout: 300_000,
        },
      },
      {
        test: {
          // What ships, run for real: the built CLI, the image, compose.yaml and scripts/run-local.sh. Its own
          // setup builds dist/ and the image, and sweeps compose projects.
          ...withContainers,
          name: 'ship',
          include: ['test/ship/**/*.test.ts'],
          globalSetup: ['test/ship/global-setup.ts'],
          testTimeout: 120_000,
          hookTimeout: 300_000,
        },
      },
      {
        test: {
          // The runbook on a real one-node Kubernetes: its own setup brings the node up (scripts/kube/node-up.sh)
          // and tears it down after. One file at a time: they share the node's :443.
          name: 'node',
          include: ['test/node/**/*.test.ts'],
          globalSetup: ['test/node/global-setup.ts'],
          fileParallelism: false,
          testTimeout: 300_000,
          hookTimeout: 300_000,
        },
      },
      {
        test: {
          ...withContainers,
          name: 'faults',
          include: ['test/faults/**/*.test.ts'],
          testTimeout: 240_000,
          hookTimeout: 300_000,
        },
      },
    ],
  },
});
