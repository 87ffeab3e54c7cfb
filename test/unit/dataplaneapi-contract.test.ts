import { expect } from 'vitest';
import { describeProvider } from '../contract/provider-contract.js';
import { FAKE_VERSIONS, type FakeDataplaneApi, startFakeDataplaneApi } from '../support/fake-dataplaneapi.js';
import { FOREIGN_TEXT, mapRender, providerOn } from '../support/fake-dataplaneapi-provider.js';

// The contract against a fake of each supported version: where each keeps ownership tags (metadata on
// v3.2+, descriptions on v3.0) is read off its own document, and a tag written where that version has no
// place for it would read back foreign and fail the contract.
for (const version of FAKE_VERSIONS) {
  let contractFake: FakeDataplaneApi | undefined;
  describeProvider(
    `dataplaneapi (fake API v${version}, every request checked against its OpenAPI document)`,
    async () => {
      const fake = await startFakeDataplaneApi({ version });
      contractFake = fake;
      const provider = providerOn(fake);
      return {
        provider,
        render: mapRender(4),
        reset: async () => fake.reset(FOREIGN_TEXT),
        cleanup: async () => {
          expect(contractFake?.violations).toEqual([]);
          await provider.close();
          await fake.close();
        },
        fresh: () => providerOn(fake),
        persisted: () => provider.persisted(),
      };
    },
    { runs: 40 },
  );
}
