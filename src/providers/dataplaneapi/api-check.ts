import type { Logger } from 'pino';
import { type Capabilities, describeCapabilities, readCapabilities } from './capability.js';
import type { DataplaneClient } from './client.js';
import { MissingCapabilityError } from './errors.js';

/**
 * Reads the API's OpenAPI document once it answers and says what it offers (`capability.ts`), logged once;
 * refuses, naming what is missing, an API this service cannot use, and the storage layout on an API that
 * cannot read back its general storage's files.
 */
export async function checkApi(
  client: DataplaneClient,
  o: { storage: boolean; version: string; logger: Logger },
  signal: AbortSignal,
): Promise<Capabilities> {
  const spec = await client.GET('/specification_openapiv3', { signal });
  const check = readCapabilities(spec.data);
  if (!check.ok)
    throw new MissingCapabilityError(
      `the Data Plane API at ${client.url} lacks what this service needs: ${check.missing.join('; ')}`,
    );
  const caps = check.capabilities;
  if (o.storage && !caps.generalFiles)
    throw new MissingCapabilityError(
      `the Data Plane API at ${client.url} (document ${caps.document}) has no general storage to read the ` +
        'slots files back from: set KUBEBYON_DATAPLANE_SLOTS=config',
    );
  o.logger.info({ api: o.version, ...caps }, `Data Plane API ${o.version}: ${describeCapabilities(caps)}`);
  return caps;
}
