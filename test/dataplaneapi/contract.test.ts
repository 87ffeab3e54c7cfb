import { describe, it } from 'vitest';
import { describeProvider } from '../contract/provider-contract.js';
import { type Harness, resetToForeign, source, startHarness, versionUnderTest } from './harness.js';

// The provider contract, against a real Data Plane API driving a real HAProxy.
if (source) {
  describeProvider(
    `dataplaneapi on HAProxy ${versionUnderTest()}`,
    async () => {
      const harness: Harness = await startHarness();
      return {
        provider: harness.provider(),
        render: harness.render,
        reset: () => resetToForeign(harness.tb),
        cleanup: () => harness.close(),
        // A provider that never wrote anything reads back what the API holds, not what ours remembers.
        fresh: () => harness.provider(),
      };
    },
    { runs: 10, timeoutMs: 30_000 },
  );
} else {
  describe('dataplaneapi contract', () => {
    it.skip('needs KUBEBYON_TEST_DATAPLANEAPI_BIN or KUBEBYON_TEST_DATAPLANEAPI_IMAGE', () => {});
  });
}
