import type { Request, RequestHandler, Response } from 'express';
import type { Logger } from 'pino';
import type { Metrics } from '../metrics/metrics.js';
import type { RequestHead, WebhookAuthenticator } from './auth.js';
import { type BodyRefusal, decodeUtf8, hasBody, readBody, refuseFromHeaders } from './body.js';
import { continueIfAsked } from './server.js';
import { UploadBudget } from './upload-budget.js';

export interface AuthenticateOptions {
  auth: WebhookAuthenticator;
  logger: Logger;
  metrics: Pick<Metrics, 'webhookAuthFailures'>;
  bodyLimitBytes: number;
  /** Longest a client may take to send a body. */
  bodyTimeoutMs: number;
  /** Bytes that bodies not yet verified may hold together; beyond, the oldest of them get 503. */
  pendingBodyBytes: number;
}

/**
 * Authenticates a /v1 call, then parses its body as JSON into req.body (undefined when empty).
 * Everything checkable from the headers is checked before the body is read, and reading unverified bodies
 * is bounded in size, time and the bytes they hold together: a caller without the secret can hold neither
 * memory nor the room signed writes need.
 */
export function authenticate(o: AuthenticateOptions): RequestHandler {
  const budget = new UploadBudget(o.pendingBodyBytes);
  return async (req, res, next) => {
    const head: RequestHead = { method: req.method, url: req.originalUrl, header: (n) => req.get(n) };
    const pre = o.auth.precheck(head);
    if (!pre.ok) return unauthorized(req, res, o, pre.reason);
    let body: Buffer = Buffer.alloc(0);
    if (hasBody(req)) {
      const early = refuseFromHeaders(req, o.bodyLimitBytes);
      if (early) return refuseBody(req, res, o.logger, early);
      const upload = budget.enter();
      continueIfAsked(res);
      let read: Awaited<ReturnType<typeof readBody>>;
      try {
        read = await readBody(req, { limitBytes: o.bodyLimitBytes, timeoutMs: o.bodyTimeoutMs, upload });
      } finally {
        upload.leave();
      }
      if (!read.ok) return refuseBody(req, res, o.logger, read.refusal);
      body = read.body;
    }
    let result: Awaited<ReturnType<WebhookAuthenticator['check']>>;
    try {
      result = await o.auth.check({ ...head, body });
    } catch (err) {
      // The signature could not be recorded as seen (the state folder is full or read-only): acting on the
      // write would let it be replayed after a restart, so nothing is done and nothing acknowledged.
      return refuse(req, res, o.logger, 503, {
        error: 'state_unavailable',
        detail: `the call could not be recorded: ${err instanceof Error ? err.message : String(err)}`,
      });
    }
    if (!result.ok) return unauthorized(req, res, o, result.reason);
    if (body.length === 0) {
      req.body = undefined;
      return next();
    }
    const text = decodeUtf8(body);
    if (text === undefined) {
      res.status(400).json({
        error: 'invalid_request',
        field: '',
        reason: 'invalid_utf8',
        detail: 'body is not valid UTF-8',
      });
      return;
    }
    try {
      req.body = JSON.parse(text);
    } catch {
      res
        .status(400)
        .json({ error: 'invalid_request', field: '', reason: 'invalid_json', detail: 'body is not JSON' });
      return;
    }
    next();
  };
}

// Counted by reason: a burst of bad signatures is an attack or a misconfigured caller, both worth an alert.
function unauthorized(req: Request, res: Response, o: AuthenticateOptions, reason: string): void {
  o.metrics.webhookAuthFailures.inc({ reason });
  refuse(req, res, o.logger, 401, { error: 'unauthorized', reason });
}

function refuseBody(req: Request, res: Response, logger: Logger, r: BodyRefusal): void {
  const { status, ...answer } = r;
  if (status === 503) res.set('Retry-After', '1');
  refuse(req, res, logger, status, answer);
}

// A client error, logged at debug: anyone can cause one, so it must not fill the log. A body left unread
// is not read on: the connection is closed once the answer is sent.
function refuse(req: Request, res: Response, logger: Logger, status: number, answer: object): void {
  logger.debug({ status, ...answer }, 'webhook call refused');
  if (req.socket.destroyed) return;
  if (hasBody(req) && !req.complete) res.set('Connection', 'close');
  res.status(status).json(answer);
}
