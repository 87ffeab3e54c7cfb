import type { StockHaproxyConfig } from '../../config/env.js';
import type { ProviderDeps } from '../index.js';
import type { Provider } from '../provider.js';

// Placeholder until the provider lands: refuses to start with a clear reason.
export async function createStockHaproxyProvider(
  _config: StockHaproxyConfig,
  _deps: ProviderDeps,
): Promise<Provider> {
  throw new Error('the haproxy provider is not built yet');
}
