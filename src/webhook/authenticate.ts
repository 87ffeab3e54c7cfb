import express, { type RequestHandler } from 'express';
import type { WebhookAuthenticator } from './auth.js';

/**
 * Reads the body, checks the credentials over it, then parses it as JSON into req.body (undefined when
 * empty). Mounted in front of every /v1 route.
 */
export function authenticate(auth: WebhookAuthenticator, bodyLimitBytes: number): RequestHandler[] {
  return [
    express.raw({ type: () => true, limit: bodyLimitBytes }),
    (req, res, next) => {
      const body = Buffer.isBuffer(req.body) ? req.body : Buffer.alloc(0);
      const result = auth.check({
        method: req.method,
        url: req.originalUrl,
        body,
        header: (n) => req.get(n),
      });
      if (!result.ok) {
        res.status(401).json({ error: 'unauthorized', reason: result.reason });
        return;
      }
      if (body.length > 0) {
        try {
          req.body = JSON.parse(body.toString('utf8'));
        } catch {
          res.status(400).json({
            error: 'invalid_request',
            field: '',
            reason: 'invalid_json',
            detail: 'body is not JSON',
          });
          return;
        }
      } else {
        req.body = undefined;
      }
      next();
    },
  ];
}
