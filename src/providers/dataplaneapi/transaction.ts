import { type DataplaneClient, DataplaneHttpError, versionOf } from './client.js';
import { TransactionLedger } from './ledger.js';
import type { Write } from './objects.js';
import type { Applied, Counter, DataplaneProviderOptions } from './options.js';
import type { Reloads } from './reload.js';

const CLEANUP_TIMEOUT_MS = 10_000;

type TransactionOptions = Pick<
  DataplaneProviderOptions,
  'timeoutMs' | 'reloadTimeoutMs' | 'commit' | 'prepareTransactions' | 'ledgerFile' | 'logger'
>;

/**
 * Plans as one transaction committed with one reload; the next transaction opened ahead of the next change;
 * every id we open kept in a ledger until it is committed or dropped, so that a crash cannot leak it.
 */
export class Transactions {
  private readonly ledger: TransactionLedger;
  /** The transaction opened ahead of the next change, with the version it was opened at. */
  private prepared: Promise<{ id: string; version: number } | undefined> | undefined;
  private closed = false;

  constructor(
    private readonly client: DataplaneClient,
    private readonly reloads: Reloads,
    private readonly o: TransactionOptions,
  ) {
    this.ledger = new TransactionLedger(o.ledgerFile, client.url);
  }

  /** Drops the transactions an earlier run left open (after a crash), as its ledger names them. */
  async dropLeftovers(): Promise<void> {
    for (const id of await this.ledger.leftovers()) await this.drop(id, 'left open by an earlier run');
  }

  async apply(writes: Write[], version: number, signal: AbortSignal, counter: Counter): Promise<Applied> {
    const id = await this.open(version, signal, counter);
    let open = true;
    try {
      counter.requests++;
      const pidBefore = await this.reloads.settledWorkerPid(signal);
      for (const w of writes) {
        signal.throwIfAborted();
        counter.requests++;
        await send(this.client, w, id, signal);
      }
      signal.throwIfAborted();
      counter.requests++;
      // Past this point the change is HAProxy's: the commit is not cut short by the signal.
      const force = (this.o.commit ?? 'force_reload') === 'force_reload';
      const committed = await this.client.PUT('/services/haproxy/transactions/{id}', {
        params: { path: { id }, query: force ? { force_reload: true } : {} },
        timeoutMs: this.o.reloadTimeoutMs + this.o.timeoutMs,
      });
      open = false;
      await this.ledger.remove(id);
      if (committed.status === 202) await this.reloads.follow(committed.headers['reload-id'], counter);
      await this.reloads.awaitNewWorkers(pidBefore, counter);
      return { reload: 'succeeded', version: versionOf(committed.headers), versionBumps: 1 };
    } finally {
      if (open) await this.drop(id, 'the apply did not complete');
    }
  }

  /** The transaction opened ahead at `version`, else a new one; either is in the ledger. */
  private async open(version: number, signal: AbortSignal, counter: Counter): Promise<string> {
    const ahead = await this.takePrepared(version);
    if (ahead !== undefined) return ahead;
    counter.requests++;
    const opened = await this.client.POST('/services/haproxy/transactions', {
      params: { query: { version } },
      signal,
    });
    const id = opened.data.id;
    if (!id) throw new Error('the Data Plane API opened a transaction without an id');
    try {
      await this.ledger.add(id);
    } catch (err) {
      await this.drop(id, 'the apply did not complete');
      throw err;
    }
    return id;
  }

  /** Opens the next transaction ahead, at the version an apply left. */
  prepare(version: number): void {
    if (this.o.prepareTransactions === false || this.closed) return;
    const earlier = this.prepared;
    this.prepared = (async () => {
      const stale = await earlier;
      if (stale) await this.drop(stale.id, 'opened ahead at a version that has moved');
      try {
        const opened = await this.client.POST('/services/haproxy/transactions', {
          params: { query: { version } },
          signal: AbortSignal.timeout(this.o.timeoutMs),
        });
        const id = opened.data.id;
        if (!id) return undefined;
        await this.ledger.add(id);
        return { id, version };
      } catch (err) {
        this.o.logger.debug({ err: String(err) }, 'could not open a transaction ahead');
        return undefined;
      }
    })();
  }

  /** The transaction opened ahead, if it was opened at `version`; one opened at another is dropped. */
  private async takePrepared(version: number): Promise<string | undefined> {
    const ahead = await this.prepared;
    this.prepared = undefined;
    if (!ahead) return undefined;
    if (ahead.version === version) return ahead.id;
    await this.drop(ahead.id, 'opened ahead at a version that has moved');
    return undefined;
  }

  async drop(id: string, why: string): Promise<void> {
    try {
      await this.client.DELETE('/services/haproxy/transactions/{id}', {
        params: { path: { id } },
        signal: AbortSignal.timeout(CLEANUP_TIMEOUT_MS),
      });
      await this.ledger.remove(id);
      this.o.logger.info({ transaction: id, why }, 'dropped our open transaction');
    } catch (err) {
      if (err instanceof DataplaneHttpError && err.status === 404) {
        await this.ledger.remove(id);
        return;
      }
      // Kept in the ledger: the next start tries again.
      this.o.logger.warn({ transaction: id, err: String(err) }, 'could not drop our open transaction');
    }
  }

  /** Opens nothing more ahead, and drops the one open ahead. */
  async close(): Promise<void> {
    this.closed = true;
    const ahead = await this.prepared;
    this.prepared = undefined;
    if (ahead) await this.drop(ahead.id, 'shutting down');
  }
}

/** One write into transaction `transaction_id`. */
async function send(
  c: DataplaneClient,
  w: Write,
  transaction_id: string,
  signal: AbortSignal,
): Promise<void> {
  const tx = { transaction_id };
  switch (w.kind) {
    case 'create_backend':
      await c.POST('/services/haproxy/configuration/backends', {
        params: { query: { ...tx, full_section: true } },
        body: w.body,
        signal,
      });
      return;
    case 'replace_backend':
      await c.PUT('/services/haproxy/configuration/backends/{name}', {
        params: { path: { name: w.name }, query: { ...tx, full_section: true } },
        body: w.body,
        signal,
      });
      return;
    case 'delete_backend':
      await c.DELETE('/services/haproxy/configuration/backends/{name}', {
        params: { path: { name: w.name }, query: tx },
        signal,
      });
      return;
    case 'create_frontend':
      await c.POST('/services/haproxy/configuration/frontends', {
        params: { query: { ...tx, full_section: true } },
        body: w.body,
        signal,
      });
      return;
    case 'replace_frontend':
      await c.PUT('/services/haproxy/configuration/frontends/{name}', {
        params: { path: { name: w.name }, query: { ...tx, full_section: true } },
        body: w.body,
        signal,
      });
      return;
    case 'replace_rules':
      await c.PUT('/services/haproxy/configuration/frontends/{parent_name}/backend_switching_rules', {
        params: { path: { parent_name: w.frontend }, query: tx },
        body: w.body,
        signal,
      });
      return;
    case 'delete_frontend':
      await c.DELETE('/services/haproxy/configuration/frontends/{name}', {
        params: { path: { name: w.name }, query: tx },
        signal,
      });
      return;
  }
}
