import type { Provider, ProviderDeps } from '../provider.js';
import type { StockHaproxyConfig } from './config.js';
import { StockHaproxyProvider } from './provider.js';

/** `KUBEBYON_PROVIDER=haproxy`: a stock HAProxy driven through an owned `-f` file and the master CLI. */
export async function createStockHaproxyProvider(
  config: StockHaproxyConfig,
  deps: ProviderDeps,
): Promise<Provider> {
  return new StockHaproxyProvider(config, {
    logger: deps.logger.child({ provider: 'haproxy' }),
    owner: deps.owner,
    ...(deps.traffic ? { traffic: deps.traffic } : {}),
    ...(deps.persistDelayMs !== undefined ? { persistDelayMs: deps.persistDelayMs } : {}),
    ...(deps.clock ? { clock: deps.clock } : {}),
  });
}

export { StockHaproxyProvider } from './provider.js';
