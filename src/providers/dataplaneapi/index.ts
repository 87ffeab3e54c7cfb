import { join } from 'node:path';
import { errorText } from '../../model/errors.js';
import type { Provider, ProviderDeps } from '../provider.js';
import type { DataplaneConfig } from './config.js';
import { DataplaneProvider, MissingCapabilityError } from './provider.js';
import { LEDGER_FILE } from './sweep.js';

export { DataplaneProvider, MissingCapabilityError } from './provider.js';

/**
 * The Data Plane API provider (v3.0 and newer). Refuses to start against an API that lacks what the service
 * needs (a place for ownership tags: `metadata`, or descriptions on v3.0/v3.1; see `capability.ts`). An API
 * that cannot be reached yet, or refuses the credentials, does not stop the start: webhooks are still
 * accepted, readiness says why, and the loop converges once the API answers.
 */
export async function createDataplaneProvider(
  config: DataplaneConfig,
  deps: ProviderDeps,
): Promise<Provider> {
  const provider = new DataplaneProvider({
    url: config.url,
    username: config.username,
    password: config.password,
    timeoutMs: config.timeoutMs,
    reloadTimeoutMs: config.reloadTimeoutMs,
    slots: config.slots,
    ...(deps.stateDir !== undefined ? { ledgerFile: join(deps.stateDir, LEDGER_FILE) } : {}),
    logger: deps.logger,
    owner: deps.owner,
    ...(deps.persistDelayMs !== undefined ? { persistDelayMs: deps.persistDelayMs } : {}),
    ...(deps.traffic ? { traffic: deps.traffic } : {}),
    ...(deps.clock ? { clock: deps.clock } : {}),
  });
  try {
    await provider.ready(AbortSignal.timeout(config.timeoutMs));
  } catch (err) {
    if (err instanceof MissingCapabilityError) {
      await provider.close();
      throw err;
    }
    deps.logger.warn({ err: errorText(err), url: config.url }, 'the Data Plane API is not usable yet');
  }
  return provider;
}
