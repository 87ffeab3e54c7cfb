import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    projects: [
      {
        test: {
          name: 'unit',
          include: ['test/unit/**/*.test.ts'],
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
          name: 'integration',
          include: ['test/integration/**/*.test.ts'],
          globalSetup: ['test/global-setup.ts'],
          // Containers share two cores and host ports: one file at a time.
          fileParallelism: false,
          testTimeout: 60_000,
          hookTimeout: 90_000,
          env: {
            TESTCONTAINERS_RYUK_DISABLED: 'true',
            TESTCONTAINERS_HOST_OVERRIDE: 'localhost',
          },
        },
      },
      {
        test: {
          name: 'dataplaneapi',
          include: ['test/dataplaneapi/**/*.test.ts'],
          globalSetup: ['test/global-setup.ts'],
          // One HAProxy + Data Plane API at a time on two shared cores.
          fileParallelism: false,
          testTimeout: 120_000,
          hookTimeout: 180_000,
          env: {
            TESTCONTAINERS_RYUK_DISABLED: 'true',
            TESTCONTAINERS_HOST_OVERRIDE: 'localhost',
          },
        },
      },
      {
        test: {
          name: 'e2e',
          include: ['test/e2e/**/*.test.ts'],
          // Builds dist/ once; every file then starts the service as its own process.
          globalSetup: ['test/e2e/global-setup.ts'],
          fileParallelism: false,
          testTimeout: 60_000,
          hookTimeout: 300_000,
          env: {
            TESTCONTAINERS_RYUK_DISABLED: 'true',
            TESTCONTAINERS_HOST_OVERRIDE: 'localhost',
          },
        },
      },
    ],
  },
});
