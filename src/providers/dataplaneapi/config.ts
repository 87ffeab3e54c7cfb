import type { DataplaneProviderOptions } from './provider.js';

/**
 * The Data Plane API provider's settings, which `config/env.ts` maps KUBEBYON_DATAPLANE_* onto: the
 * provider's own options that an operator sets (the rest are wiring, or defaults kept for tests).
 */
export type DataplaneConfig = Required<
  Pick<
    DataplaneProviderOptions,
    | 'url'
    | 'username'
    | 'password'
    | 'timeoutMs'
    | 'reloadTimeoutMs'
    | 'runtimeMaxServers'
    | 'runtimeMaxRequests'
    | 'slots'
    | 'rawMinWrites'
    | 'commit'
  >
>;
