import type { ProviderConfig } from '../config/env.js';
import type { Provider, ProviderDeps } from './provider.js';

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
    case 'memory': {
      const { MemoryProvider } = await import('./memory/memory-provider.js');
      return new MemoryProvider();
    }
  }
}
