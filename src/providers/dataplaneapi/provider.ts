import type { RawState } from '../../haproxy/model.js';
import type { Plan } from '../../plan/plan.js';
import type { ApplyReport, Provider, ProviderInfo } from '../provider.js';
import { createClient, type DataplaneClient } from './client.js';
import { translate } from './errors.js';
import type { Snapshot } from './mapping.js';
import type { WritePlan } from './objects.js';
import type { Applied, Counter, DataplaneProviderOptions } from './options.js';
import { RawFile } from './raw-file.js';
import { Reads } from './read.js';
import { Reloads } from './reload.js';
import { applyRuntime } from './runtime.js';
import { Session } from './session.js';
import { snapshotAfter } from './snapshot-after.js';
import { Transactions } from './transaction.js';
import { planWrites } from './writes.js';

export { DataplaneUnreachableError } from './client.js';
export { MissingCapabilityError, TooManyTransactionsError } from './errors.js';
export type { DataplaneProviderOptions } from './options.js';

/**
 * The default provider: HAProxy's Data Plane API v3 (v3.0 and newer; where ownership tags are kept depends on
 * the version, read off its OpenAPI document: `capability.ts`, `tags.ts`). Reads are two `full_section`
 * lists (frontends, backends), skipped while the configuration version has not moved (`read.ts`); a plan is
 * applied as one transaction committed with one reload (`transaction.ts`), as one edited file when it is
 * large (`raw-file.ts`), or, when it only moves server endpoints, through the runtime path without a reload
 * (`runtime.ts`). See `writes.ts` for how operations become requests, `reload.ts` for how reloads are
 * verified and repaired, `errors.ts` for how the API's answers become the loop's error kinds.
 */
export class DataplaneProvider implements Provider {
  readonly name = 'dataplaneapi';
  private readonly client: DataplaneClient;
  private readonly reloads: Reloads;
  private readonly reads: Reads;
  private readonly transactions: Transactions;
  private readonly rawFile: RawFile;
  private readonly session: Session;

  constructor(private readonly o: DataplaneProviderOptions) {
    this.client = createClient({
      url: o.url,
      username: o.username,
      password: o.password,
      timeoutMs: o.timeoutMs,
      ...(o.traffic
        ? {
            onRequest: () => o.traffic?.request(),
            onBytes: (direction: 'sent' | 'received', n: number) => o.traffic?.bytes(direction, n),
          }
        : {}),
    });
    this.reloads = new Reloads(this.client, o);
    const capabilities = () => this.session.capabilities;
    this.reads = new Reads(this.client, o.owner, capabilities);
    this.transactions = new Transactions(this.client, this.reloads, o);
    this.rawFile = new RawFile(this.client, this.reloads, { ...o, capabilities });
    this.session = new Session(
      this.client,
      { transactions: this.transactions, reloads: this.reloads, reads: this.reads },
      o.logger,
    );
  }

  /**
   * Checks the API once it answers: capabilities, transactions a crashed run left open, and (not for a
   * readiness probe, which must not reload HAProxy) a view left untrusted by a failed reload.
   */
  async ready(signal: AbortSignal, repair = true): Promise<void> {
    try {
      await this.session.ready(signal, repair);
    } catch (err) {
      throw this.translate(err);
    }
  }

  async ping(signal: AbortSignal): Promise<ProviderInfo> {
    await this.ready(signal, false);
    try {
      return await this.session.ping(signal);
    } catch (err) {
      throw this.translate(err);
    }
  }

  async readState(signal: AbortSignal): Promise<RawState> {
    await this.ready(signal);
    try {
      return await this.reads.handOut(signal);
    } catch (err) {
      throw this.translate(err);
    }
  }

  async apply(plan: Plan, current: RawState, signal: AbortSignal): Promise<ApplyReport> {
    signal.throwIfAborted();
    if (plan.operations.length === 0) return { reload: 'none', requests: 0 };
    await this.ready(signal);
    const counter = { requests: 0 };
    let after: Snapshot | undefined;
    try {
      const snapshot = await this.reads.snapshotOf(current, signal);
      const work = planWrites(plan, snapshot, {
        runtimeMaxServers: this.o.runtimeMaxServers,
        owner: this.o.owner,
        tags: this.session.capabilities,
      });
      signal.throwIfAborted();
      if (work.kind === 'none') return { reload: 'none', requests: 0 };
      const done = await this.send(plan, work, snapshot, signal, counter);
      // The version moved by our own writes alone: the API now holds the snapshot with them applied.
      if (done.version === snapshot.version + done.versionBumps) {
        this.transactions.prepare(done.version);
        const applied =
          work.kind === 'transaction' && done.moves
            ? { kind: 'runtime' as const, updates: done.moves }
            : work;
        after = snapshotAfter(snapshot, applied, done.version);
      }
      return { reload: done.reload, requests: counter.requests };
    } catch (err) {
      throw this.translate(err);
    } finally {
      // Otherwise what was read before no longer tells what is there (a failed runtime apply may have moved
      // some servers already): the next read lists both sections again.
      this.reads.keep(after);
    }
  }

  /** The plan's writes by the path that fits them: runtime, edited file, or transaction. */
  private async send(
    plan: Plan,
    work: Exclude<WritePlan, { kind: 'none' }>,
    snapshot: Snapshot,
    signal: AbortSignal,
    counter: Counter,
  ): Promise<Applied> {
    if (work.kind === 'runtime')
      return applyRuntime(this.client, this.reloads, work.updates, snapshot.version, signal, counter);
    return (
      (await this.rawFile.apply(plan, work, snapshot, signal, counter)) ??
      (await this.transactions.apply(work.writes, snapshot.version, signal, counter))
    );
  }

  private translate(err: unknown): unknown {
    return translate(err, this.client.url, (why) => this.reloads.distrust(why));
  }

  async close(): Promise<void> {
    await this.transactions.close();
    this.client.close();
  }
}
