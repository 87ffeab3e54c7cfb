import { createConnection } from 'node:net';
import { type ProviderTraffic, UNCOUNTED } from '../provider.js';

// The master re-executes itself on every reload; meanwhile its socket refuses connections for a moment.
const NOT_LISTENING = new Set(['ECONNREFUSED', 'ENOENT', 'EAGAIN']);
const CONNECT_RETRY_MS = 3_000;

/**
 * HAProxy's master CLI over its unix socket (`haproxy -W -S <path>`): one command per connection, written,
 * half-closed, and read to the end (the way the master wants it). `@1 <command>` reaches the current worker's
 * runtime API. Counts the commands it sends, for `ApplyReport.requests`.
 */
export class MasterCli {
  sent = 0;

  constructor(
    readonly path: string,
    private readonly timeoutMs = 10_000,
    private readonly traffic: ProviderTraffic = UNCOUNTED,
  ) {}

  /**
   * Sends `command`; rejects on socket errors, on `signal`, or after the timeout. A socket that does not
   * accept connections yet is tried again for a few seconds: nothing was sent, so any command may be retried.
   */
  async send(command: string, signal: AbortSignal, timeoutMs = this.timeoutMs): Promise<string> {
    const deadline = Date.now() + CONNECT_RETRY_MS;
    for (;;) {
      signal.throwIfAborted();
      try {
        return await this.once(command, signal, timeoutMs);
      } catch (err) {
        if (!(err instanceof NotConnectedError) || Date.now() > deadline) throw err;
        await sleep(50, signal);
      }
    }
  }

  private once(command: string, signal: AbortSignal, timeoutMs: number): Promise<string> {
    return new Promise<string>((resolve, reject) => {
      const socket = createConnection(this.path);
      let out = '';
      let settled = false;
      let connected = false;
      const finish = (err: Error | null) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        signal.removeEventListener('abort', onAbort);
        socket.destroy();
        if (err) reject(err);
        else resolve(out);
      };
      const onAbort = () => finish(signal.reason instanceof Error ? signal.reason : new Error('aborted'));
      const timer = setTimeout(
        () => finish(new Error(`master CLI ${this.path}: no answer to "${command}" within ${timeoutMs} ms`)),
        timeoutMs,
      );
      signal.addEventListener('abort', onAbort, { once: true });
      socket.setEncoding('utf8');
      socket.on('connect', () => {
        connected = true;
        // A line may carry several `;`-separated commands: each counts.
        const commands = command.split(';').length;
        this.sent += commands;
        for (let i = 0; i < commands; i++) this.traffic.request();
        this.traffic.bytes('sent', Buffer.byteLength(command) + 1);
        socket.end(`${command}\n`);
      });
      socket.on('data', (chunk: string) => {
        out += chunk;
        this.traffic.bytes('received', Buffer.byteLength(chunk));
      });
      socket.on('error', (err: NodeJS.ErrnoException) => {
        const message = `master CLI ${this.path}: ${err.message}`;
        finish(
          !connected && NOT_LISTENING.has(err.code ?? '')
            ? new NotConnectedError(message)
            : new Error(message),
        );
      });
      socket.on('close', () => finish(null));
    });
  }

  /** Like `send`, retried on any failure until `deadline`: for reads while the master reloads. */
  async sendRetrying(command: string, signal: AbortSignal, deadline: number): Promise<string> {
    let last: unknown;
    for (;;) {
      try {
        return await this.send(
          command,
          signal,
          Math.max(1000, Math.min(this.timeoutMs, deadline - Date.now())),
        );
      } catch (err) {
        // Aborted while retrying: the failure that kept us retrying says more than "aborted".
        if (signal.aborted) throw last ?? err;
        last = err;
        if (Date.now() >= deadline) throw err;
        await sleep(50, signal).catch(() => {
          throw err;
        });
      }
    }
  }
}

class NotConnectedError extends Error {
  override readonly name = 'NotConnectedError';
}

export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}
