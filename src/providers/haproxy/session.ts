import { dirname } from 'node:path';
import type { Logger } from 'pino';
import { writeFileAtomic } from '../../store/atomic-file.js';
import type { ProviderTraffic } from '../provider.js';
import type { StockHaproxyConfig } from './config.js';
import { type MasterCli, sleep } from './master-cli.js';

/** The owned file is configuration, not a secret: HAProxy (possibly another user) must read it. */
export const OWNED_FILE_MODE = 0o644;
const READ_RETRY_MS = 5_000;

/** What the provider's parts (read, runtime, reload) share: the settings, the one master CLI, the log. */
export interface Session {
  readonly config: StockHaproxyConfig;
  readonly cli: MasterCli;
  readonly logger: Logger;
  /** Counts the owned file's bytes when written (the master CLI counts its own commands). */
  readonly traffic: ProviderTraffic | undefined;
}

/** The folder SNI map files live in: the owned file's. */
export function mapDirOf(s: Session): string {
  return dirname(s.config.ownedFile);
}

/**
 * A read-only command, tried again for a few seconds on any failure: while the master re-executes itself
 * on a reload (ours or the operator's) it may take a connection and then reset it.
 */
export async function readCommand(s: Session, command: string, signal: AbortSignal): Promise<string> {
  const deadline = Date.now() + READ_RETRY_MS;
  for (;;) {
    const answer = await s.cli.sendRetrying(command, signal, deadline);
    // An empty answer is a connection the re-executing master closed unread.
    if (answer.trim() !== '' || Date.now() > deadline) return answer;
    await sleep(50, signal);
  }
}

export async function writeOwnedFile(s: Session, text: string): Promise<void> {
  await writeFileAtomic(s.config.ownedFile, text, OWNED_FILE_MODE);
  s.traffic?.bytes('sent', Buffer.byteLength(text));
}
