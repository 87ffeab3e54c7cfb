import type { DataplaneProviderOptions } from './provider.js';

/**
 * The Data Plane API provider's settings, which `config/env.ts` maps KUBEBYON_DATAPLANE_* onto: the
 * provider's own options that an operator sets (the rest are wiring).
 */
export type DataplaneConfig = Required<
  Pick<DataplaneProviderOptions, 'url' | 'username' | 'password' | 'timeoutMs' | 'reloadTimeoutMs' | 'slots'>
>;
