import { readFile, rm } from 'node:fs/promises';
import type { Logger } from 'pino';
import { errorText } from '../../model/errors.js';
import { type DataplaneClient, DataplaneHttpError } from './client.js';

/** The ledger of open transactions that releases before this one kept beside the state file. */
export const LEDGER_FILE = 'dataplaneapi-transactions.json';

/**
 * Transactions nobody will ever commit, deleted once at start: this service opens none (every change is one
 * versioned push of the file, `files.ts`), but a release before this one did, and a kill could leave one
 * open, listed in its ledger; and any transaction, ours or another tool's, whose version the configuration
 * has moved past can never commit (the API answers 406 `outdated`). The API caps open transactions (20 by
 * default) and never expires them, so each one left stops every writer a little closer to that cap.
 */
export async function sweepTransactions(
  client: DataplaneClient,
  ledgerFile: string | undefined,
  logger: Logger,
  signal: AbortSignal,
  /** Only transactions of these versions (those the API opened for pushes of ours it was killed during). */
  only?: ReadonlySet<number>,
): Promise<void> {
  const ledgered = ledgerFile ? await readLedger(ledgerFile) : [];
  const { data: version } = await client.GET('/services/haproxy/configuration/version', { signal });
  const listed = (await client.GET('/services/haproxy/transactions', { signal })).data ?? [];
  const gone: string[] = [];
  for (const t of listed) {
    const id = t.id;
    if (!id || t.status !== 'in_progress') continue;
    const outdated = typeof t._version === 'number' && t._version < version;
    if (!outdated && !ledgered.includes(id)) continue;
    if (only && !(typeof t._version === 'number' && only.has(t._version))) continue;
    try {
      await client.DELETE('/services/haproxy/transactions/{id}', { params: { path: { id } }, signal });
      gone.push(id);
    } catch (err) {
      if (!(err instanceof DataplaneHttpError && err.status === 404)) throw err;
    }
  }
  if (gone.length > 0)
    logger.info({ transactions: gone, version }, 'deleted transactions that can never be committed');
  if (ledgerFile)
    await rm(ledgerFile, { force: true }).catch((err) => {
      logger.warn({ err: errorText(err), file: ledgerFile }, 'could not remove the old transaction ledger');
    });
}

async function readLedger(file: string): Promise<string[]> {
  try {
    const parsed = JSON.parse(await readFile(file, 'utf8')) as { open?: unknown };
    return Array.isArray(parsed.open)
      ? parsed.open.filter((id): id is string => typeof id === 'string' && /^[A-Za-z0-9-]{1,64}$/.test(id))
      : [];
  } catch {
    return [];
  }
}
