import type { Logger } from 'pino';
import type { ProviderConfig } from '../config/env.js';
import type { Owner } from '../haproxy/model.js';
import type { Provider, ProviderTraffic } from './provider.js';

export interface ProviderDeps {
  logger: Logger;
  /** Whose tags the provider writes (the registry); the composition root wraps the provider with it. */
  owner: Owner;
  /** A directory the provider may keep small files in (the state file's): e.g. the open-transaction ledger. */
  stateDir?: string;
  /** Counts what the provider sends to HAProxy (the service feeds its metrics). */
  traffic?: ProviderTraffic;
}

/** The provider a configuration names; each lives in its own folder and is loaded only when chosen. */
export async function createProvider(config: ProviderConfig, deps: ProviderDeps): Promise<Provider> {
  switch (config.kind) {
    case 'dataplaneapi': {
      const { createDataplaneProvider } = await import('./dataplaneapi/index.js');
      return createDataplaneProvider(config, deps);
    }
    case 'haproxy': {
      const { createStockHaproxyProvider } = await import('./haproxy/index.js');
      return createStockHaproxyProvider(config, deps);
    }
  }
}
