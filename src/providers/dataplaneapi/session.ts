import type { ProviderInfo } from '../provider.js';
import { missingCapabilities } from './capability.js';
import type { DataplaneClient } from './client.js';
import { MissingCapabilityError } from './errors.js';
import type { Reads } from './read.js';
import type { Reloads } from './reload.js';
import type { Transactions } from './transaction.js';

/**
 * What is checked once the API answers, before it is used: its capabilities (off its own OpenAPI document),
 * the transactions a crashed run left open, and a view left untrusted by a failed reload. Errors come back
 * as the API gave them; the provider translates them.
 */
export class Session {
  private capable = false;
  private leftoversDropped = false;
  private apiVersion: string | undefined;

  constructor(
    private readonly client: DataplaneClient,
    private readonly parts: { transactions: Transactions; reloads: Reloads; reads: Reads },
  ) {}

  /** `repair` is false for a readiness probe, which must not reload HAProxy. */
  async ready(signal: AbortSignal, repair: boolean): Promise<void> {
    if (!this.capable) {
      const spec = await this.client.GET('/specification_openapiv3', { signal });
      const missing = missingCapabilities(spec.data);
      if (missing.length > 0) {
        throw new MissingCapabilityError(
          `the Data Plane API at ${this.client.url} lacks what this service needs: ${missing.join('; ')}`,
        );
      }
      this.capable = true;
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

  /** A cheap proof that the API answers and HAProxy runs behind it; call `ready` first. */
  async ping(signal: AbortSignal): Promise<ProviderInfo> {
    await this.client.GET('/services/haproxy/configuration/version', { signal });
    if (this.apiVersion === undefined) {
      const info = await this.client.GET('/info', { signal });
      this.apiVersion = info.data.api?.version ?? 'unknown';
    }
    const health = await this.client.GET('/health', { signal });
    if (health.data.haproxy === 'down')
      throw new Error(`the Data Plane API at ${this.client.url} answers, but reports HAProxy down`);
    return { version: `Data Plane API ${this.apiVersion}`, endpoint: this.client.url };
  }
}
