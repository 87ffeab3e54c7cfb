import { haproxyMessage } from '../../haproxy/alerts.js';
import { ConcurrentChangeError, ReloadFailedError, TerminalError } from '../../model/errors.js';
import { DataplaneHttpError } from './client.js';

/** The API lacks something this service needs (a place for ownership tags, an endpoint): retrying cannot help. */
export class MissingCapabilityError extends TerminalError {
  override name = 'MissingCapabilityError';
}

/**
 * The API says too many requests (429; it answers so when other tools hold too many transactions open):
 * transient, retried with backoff.
 */
export class TooManyTransactionsError extends Error {
  override readonly name = 'TooManyTransactionsError';
}

/** A reload HAProxy refused, with its own words from the reload's output. */
export function reloadFailedError(output: string, reload?: string): ReloadFailedError {
  const which = reload === undefined ? '' : ` (reload ${reload})`;
  return new ReloadFailedError(
    `HAProxy could not load the change and keeps running its previous configuration${which}: ${haproxyMessage(output)}`,
  );
}

/**
 * API answers as the loop's error kinds: terminal, concurrent change, or transient. `distrust` is told when
 * the answer says a reload failed: the API's view may then hold a change HAProxy did not load.
 */
export function translate(err: unknown, url: string, distrust: (why: string) => void): unknown {
  if (!(err instanceof DataplaneHttpError)) return err;
  switch (err.status) {
    case 401:
    case 403:
      return new TerminalError(
        `the Data Plane API at ${url} refused the credentials (${err.status}): check KUBEBYON_DATAPLANE_USERNAME and KUBEBYON_DATAPLANE_PASSWORD`,
      );
    case 404:
    case 406:
    case 409:
      return new ConcurrentChangeError(`the configuration changed meanwhile: ${err.message}`);
    case 429:
      return new TooManyTransactionsError(
        `the Data Plane API has too many open transactions (429): ${err.apiMessage}; retrying with backoff`,
      );
    case 400:
      return badRequest(err, distrust);
    default:
      return err.status >= 500 ? new Error(err.message) : new TerminalError(err.message);
  }
}

function badRequest(err: DataplaneHttpError, distrust: (why: string) => void): Error {
  if (/reload failed/i.test(err.apiMessage)) {
    // Seen on v3.4.0: after a failed `force_reload` commit that changed an existing frontend, the API's
    // view kept the change (the shared notes saw it restored for a new one): distrust it either way.
    distrust('a force_reload commit failed');
    return reloadFailedError(err.apiMessage);
  }
  if (/validation error/i.test(err.apiMessage)) {
    return new TerminalError(`HAProxy refused the configuration: ${haproxyMessage(err.apiMessage)}`);
  }
  return new TerminalError(`the Data Plane API refused a request: ${err.message}`);
}
