import type { NextFunction, Request, Response } from 'express';
import type { Logger } from 'pino';
import type { ZodError } from 'zod';
import type { FieldError } from './clusters.js';

export function fieldError(res: Response, e: FieldError): void {
  res.status(e.status).json({ error: 'invalid_request', field: e.field, reason: e.reason, detail: e.detail });
}

const MAX_ISSUES = 20;

export function zodError(res: Response, err: ZodError, prefix = ''): void {
  const issues = err.issues.map((i) => ({
    field: prefix + (i.code === 'unrecognized_keys' ? [...i.path, ...i.keys].join('.') : i.path.join('.')),
    reason: i.code,
    detail: i.message,
  }));
  const first = issues[0] ?? { field: '', reason: 'invalid', detail: 'invalid body' };
  // A set of 20,000 bad items has 80,000 issues: the answer names the first few and counts the rest.
  const listed = issues.slice(0, MAX_ISSUES);
  const more = issues.length - listed.length;
  res
    .status(400)
    .json({ error: 'invalid_request', ...first, issues: listed, ...(more > 0 ? { more_issues: more } : {}) });
}

export function notFound(_req: Request, res: Response): void {
  res.status(404).json({ error: 'not_found' });
}

/**
 * The last handler: whatever a route or middleware passed to next(err). A 4xx is the caller's doing and
 * logged at debug without a stack (anyone can cause one); only a real failure is logged at error.
 */
export function errorHandler(logger: Logger) {
  return (err: Error & { status?: number }, _req: Request, res: Response, _next: NextFunction) => {
    const status = err.status && err.status >= 400 && err.status < 500 ? err.status : 500;
    if (status < 500) {
      logger.debug({ status, message: err.message }, 'request refused');
      res.status(status).json({ error: 'bad_request', detail: err.message });
      return;
    }
    logger.error({ err }, 'request failed');
    res.status(500).json({ error: 'internal_error' });
  };
}
