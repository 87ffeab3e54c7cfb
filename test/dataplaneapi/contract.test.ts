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
  // Every plan through transactions and single requests; then every plan through the edited file (endpoint
  // moves as runtime actions). A provider that never wrote anything reads back each time as well.
  // Then map routing (the default): slots and map entries at runtime, persisted soon after.
  for (const [path, options, routing] of [
    ['requests', { rawMinWrites: 0 }, 'rules'],
    ['edited file', { rawMinWrites: 1, runtimeMaxServers: 0 }, 'rules'],
    ['map routing', { persistDebounceMs: 20, persistMaxDelayMs: 200 }, 'map'],
    ['map routing, slots file', { slots: 'storage', persistDebounceMs: 20, persistMaxDelayMs: 200 }, 'map'],
  ] as const) {
    describeProvider(
      `dataplaneapi (${path}) on HAProxy ${versionUnderTest()}`,
      async () => {
        const harness: Harness = await startHarness();
        const provider = harness.provider(options);
        return {
          ...('slots' in options && !(await readsGeneralFiles(harness))
            ? { skip: 'this API version cannot read back its general storage files' }
            : {}),
          provider,
          persisted: () => provider.persisted(),
          render: { ...harness.render, routing, minSlots: 4 },
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
