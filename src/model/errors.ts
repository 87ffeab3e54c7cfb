/**
 * The error kinds every layer shares: the loop decides from them whether and when to try again
 * (`src/reconcile/requeue.ts`), the planner and the providers throw them. A leaf module, so that `plan/`,
 * `registry/` and `providers/` can all import it without importing each other.
 */

/** Someone else changed HAProxy's configuration meanwhile: read again, plan again, try again. */
export class ConcurrentChangeError extends Error {
  override readonly name: string = 'ConcurrentChangeError';
}

/** An error that retrying cannot fix (bad credentials, a configuration HAProxy refuses): not retried. */
export class TerminalError extends Error {
  override name = 'TerminalError';
}

/**
 * The change was committed but HAProxy could not load it; HAProxy keeps running its previous configuration.
 * `message` carries HAProxy's own words (e.g. `cannot bind socket (Address already in use)`). Not terminal:
 * the cause (a port another process holds) can go away by itself, so the loop backs it off like any
 * transient error and the change is loaded once HAProxy can.
 */
export class ReloadFailedError extends Error {
  override name = 'ReloadFailedError';
}

/** A plan names an object another owner (or no owner) holds: refused as a whole, whatever the plan says. */
export class NotOwnedError extends TerminalError {
  override name = 'NotOwnedError';
}

/** A plan refused because this replica may not write now (it lost, or never held, the leadership). */
export class FencedError extends TerminalError {
  override name = 'FencedError';
}

/** The reason an error gives a cluster's status or a log line: the message, without a stack. */
export function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
