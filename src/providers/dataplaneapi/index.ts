import type { DataplaneConfig } from '../../config/env.js';
import type { ProviderDeps } from '../index.js';
import type { Provider } from '../provider.js';

// Placeholder until the provider lands: refuses to start with a clear reason.
export async function createDataplaneProvider(
  _config: DataplaneConfig,
  _deps: ProviderDeps,
): Promise<Provider> {
  throw new Error('the dataplaneapi provider is not built yet');
}
