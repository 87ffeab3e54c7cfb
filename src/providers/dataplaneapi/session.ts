import type { Logger } from 'pino';
import type { ProviderInfo } from '../provider.js';
import { type Capabilities, readCapabilities } from './capability.js';
import type { DataplaneClient } from './client.js';
import { MissingCapabilityError } from './errors.js';
import type { Reads } from './read.js';
import type { Reloads } from './reload.js';
import type { Transactions } from './transaction.js';

/**
 * What is checked once the API answers, before it is used: its capabilities (off its own OpenAPI document:
 * where ownership tags go, which write paths exist), the transactions a crashed run left open, and a view
 * left untrusted by a failed reload. Errors come back as the API gave them; the provider translates them.
 */
export class Session {
  private caps: Capabilities | undefined;
  private leftoversDropped = false;
  private apiVersion: string | undefined;

  constructor(
    private readonly client: DataplaneClient,
    private readonly parts: { transactions: Transactions; reloads: Reloads; reads: Reads },
    private readonly logger: Logger,
  ) {}

  /** What the API can do; only after `ready` has succeeded once. */
  get capabilities(): Capabilities {
    if (!this.caps) throw new Error('the Data Plane API has not been checked yet');
    return this.caps;
  }

  /** `repair` is false for a readiness probe, which must not reload HAProxy. */
  async ready(signal: AbortSignal, repair: boolean): Promise<void> {
    if (!this.caps) {
      const spec = await this.client.GET('/specification_openapiv3', { signal });
      const check = readCapabilities(spec.data);
      if (!check.ok) {
        throw new MissingCapabilityError(
          `the Data Plane API at ${this.client.url} lacks what this service needs: ${check.missing.join('; ')}`,
        );
      }
      const version = await this.version(signal);
      const caps = check.capabilities;
      this.logger.info({ api: version, ...caps }, `Data Plane API ${version}: ${describeCapabilities(caps)}`);
      this.caps = caps;
    }
    if (!this.leftoversDropped) {
      await this.parts.transactions.dropLeftovers();
      this.leftoversDropped = true;
    }
    if (repair && this.parts.reloads.untrusted) {
      await this.parts.reloads.reloadFromDisk(signal);
      this.parts.reads.forget();
    }
  }

  private async version(signal: AbortSignal): Promise<string> {
    if (this.apiVersion === undefined) {
      const info = await this.client.GET('/info', { signal });
      this.apiVersion = info.data.api?.version ?? 'unknown';
    }
    return this.apiVersion;
  }

  /** A cheap proof that the API answers and HAProxy runs behind it; call `ready` first. */
  async ping(signal: AbortSignal): Promise<ProviderInfo> {
    await this.client.GET('/services/haproxy/configuration/version', { signal });
    const version = await this.version(signal);
    const health = await this.client.GET('/health', { signal });
    if (health.data.haproxy === 'down')
      throw new Error(`the Data Plane API at ${this.client.url} answers, but reports HAProxy down`);
    return { version: `Data Plane API ${version}`, endpoint: this.client.url };
  }
}

/** The ownership mechanism and write paths, in words, for the start log. */
export function describeCapabilities(caps: Capabilities): string {
  const ownership =
    caps.ownership === 'metadata'
      ? 'ownership tags in `metadata` on every object'
      : `ownership tags in the \`description\` of frontends and backends, ${
          caps.serverTags ? 'in `metadata` on servers' : 'servers owned through their backend'
        }, binds and rules known by shape`;
  const large = caps.rawFile
    ? 'large plans as one edited file'
    : 'large plans as transactions (no edited-file path)';
  return `${ownership}; ${large} (OpenAPI document ${caps.document})`;
}
