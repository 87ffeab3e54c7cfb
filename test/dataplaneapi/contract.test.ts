import { describe, it } from 'vitest';
import { describeProvider } from '../contract/provider-contract.js';
import {
  type Harness,
  readsGeneralFiles,
  resetToForeign,
  source,
  startHarness,
  versionUnderTest,
} from './harness.js';

// The provider contract, against a real Data Plane API driving a real HAProxy.
if (source) {
  // Map routing (the only layout): slots and map entries at runtime, persisted soon after; the slot backends
  // in the configuration (the default) and in the API's general storage (the slots files).
  for (const [layout, options] of [
    ['slots in config', { persistDelayMs: 20 }],
    ['slots in storage', { slots: 'storage', persistDelayMs: 20 }],
  ] as const) {
    describeProvider(
      `dataplaneapi (${layout}) on HAProxy ${versionUnderTest()}`,
      async () => {
        const harness: Harness = await startHarness();
        const provider = harness.provider(options);
        return {
          ...('slots' in options && !(await readsGeneralFiles(harness))
            ? { skip: 'this API version cannot read back its general storage files' }
            : {}),
          provider,
          persisted: () => provider.persisted(),
          render: harness.render,
          reset: () => resetToForeign(harness.tb),
          cleanup: () => harness.close(),
          // A provider of the same settings that never wrote (the slots file's place is one of them).
          fresh: () => harness.provider('slots' in options ? { slots: options.slots } : {}),
        };
      },
      { runs: 10, timeoutMs: 30_000 },
    );
  }
} else {
  describe('dataplaneapi contract', () => {
    it.skip('needs KUBEBYON_TEST_DATAPLANEAPI_BIN or KUBEBYON_TEST_DATAPLANEAPI_IMAGE', () => {});
  });
}
