import { describe, it } from 'vitest';
import { describeProvider } from '../contract/provider-contract.js';
import { type Harness, resetToForeign, source, startHarness, versionUnderTest } from './harness.js';

// The provider contract, against a real Data Plane API driving a real HAProxy.
if (source) {
  let h: Harness | undefined;
  describeProvider(
    `dataplaneapi on HAProxy ${versionUnderTest()}`,
    async () => {
      h = await startHarness();
      const harness = h;
      const provider = harness.provider();
      return {
        provider,
        render: harness.render,
        reset: () => resetToForeign(harness.tb),
        cleanup: () => harness.close(),
      };
    },
    { runs: 6, timeoutMs: 30_000 },
  );
} else {
  describe('dataplaneapi contract', () => {
    it.skip('needs KUBEBYON_TEST_DATAPLANEAPI_BIN or KUBEBYON_TEST_DATAPLANEAPI_IMAGE', () => {});
  });
}
