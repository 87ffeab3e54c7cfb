import { describe, it } from 'vitest';
import { describeProvider } from '../contract/provider-contract.js';
import { type Harness, resetToForeign, source, startHarness, versionUnderTest } from './harness.js';

// The provider contract, against a real Data Plane API driving a real HAProxy.
if (source) {
  // Every plan through transactions and single requests; then every plan through the edited file (endpoint
  // moves as runtime actions). A provider that never wrote anything reads back each time as well.
  for (const [path, options] of [
    ['requests', { rawMinWrites: 0 }],
    ['edited file', { rawMinWrites: 1, runtimeMaxServers: 0 }],
  ] as const) {
    describeProvider(
      `dataplaneapi (${path}) on HAProxy ${versionUnderTest()}`,
      async () => {
        const harness: Harness = await startHarness();
        return {
          provider: harness.provider(options),
          render: harness.render,
          reset: () => resetToForeign(harness.tb),
          cleanup: () => harness.close(),
          fresh: () => harness.provider(),
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
