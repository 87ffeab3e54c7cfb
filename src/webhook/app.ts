import express, { type RequestHandler } from 'express';
import type { Logger } from 'pino';
import { type Metrics, methodLabel, runBeforeScrape } from '../metrics/metrics.js';
import type { Loop } from '../reconcile/reconciler.js';
import type { DesiredStore } from '../store/desired-store.js';
import type { WebhookAuthenticator } from './auth.js';
import { authenticate } from './authenticate.js';
import { clustersRouter } from './clusters-router.js';
import { errorHandler, notFound } from './errors.js';
import { openApiDocument } from './openapi.js';
import type { Readiness } from './readiness.js';

export interface AppOptions {
  store: DesiredStore;
  reconciler: Loop;
  metrics: Metrics;
  logger: Logger;
  auth: WebhookAuthenticator;
  /** Longest a `?wait=true` call waits for its change to be applied. */
  waitTimeoutMs: number;
  bodyLimitBytes: number;
  /** Longest a client may take to send a request body (408 after). */
  bodyTimeoutMs?: number;
  /** Bytes that request bodies not yet verified may hold together (by default 16 bodies of the limit). */
  pendingBodyBytes?: number;
  readiness(): Promise<Readiness>;
  version: string;
}

export const DEFAULT_BODY_TIMEOUT_MS = 10_000;
// As many full-size bodies as kubebyon-api could have in flight at once, with room to spare.
export const PENDING_BODIES_OF_THE_LIMIT = 16;

/** The webhook API, health endpoints and metrics. Every /v1 call is authenticated before it is acted on. */
export function createApp(o: AppOptions): express.Express {
  const app = express();
  app.disable('x-powered-by');
  app.set('query parser', 'simple');
  app.use(requestLog(o.metrics, o.logger));
  app.use(publicRoutes(o));
  const guard = authenticate({
    auth: o.auth,
    logger: o.logger,
    metrics: o.metrics,
    bodyLimitBytes: o.bodyLimitBytes,
    bodyTimeoutMs: o.bodyTimeoutMs ?? DEFAULT_BODY_TIMEOUT_MS,
    pendingBodyBytes: o.pendingBodyBytes ?? PENDING_BODIES_OF_THE_LIMIT * o.bodyLimitBytes,
  });
  app.use('/v1', guard, clustersRouter({ ...o, stampOf: (req) => o.auth.stampOf(req) }));
  app.use(notFound);
  app.use(errorHandler(o.logger));
  return app;
}

// Counted by route template, never by path, so that labels stay bounded.
function requestLog(metrics: Metrics, logger: Logger): RequestHandler {
  return (req, res, next) => {
    const started = process.hrtime.bigint();
    res.on('finish', () => {
      const route = req.route?.path ? `${req.baseUrl}${String(req.route.path)}` : 'unmatched';
      metrics.webhookRequests.inc({ method: methodLabel(req.method), route, status: String(res.statusCode) });
      logger.info(
        {
          method: req.method,
          route,
          status: res.statusCode,
          ms: Number(process.hrtime.bigint() - started) / 1e6,
        },
        'request',
      );
    });
    next();
  };
}

/** Health, readiness, metrics and the API document: no credentials needed. */
function publicRoutes(o: Pick<AppOptions, 'metrics' | 'readiness' | 'version'>): express.Router {
  const router = express.Router();
  router.get('/healthz', (_req, res) => {
    res.json({ status: 'ok' });
  });
  // Only the verdicts: a check's detail can name internal addresses; signed callers get it at /v1/readyz.
  router.get('/readyz', async (_req, res) => {
    const r = await o.readiness();
    const checks = Object.fromEntries(Object.entries(r.checks).map(([name, c]) => [name, { ok: c.ok }]));
    res.status(r.ready ? 200 : 503).json({ ready: r.ready, checks });
  });
  router.get('/metrics', async (_req, res) => {
    await runBeforeScrape(o.metrics);
    res.type(o.metrics.registry.contentType).send(await o.metrics.registry.metrics());
  });
  router.get('/openapi.json', (_req, res) => {
    res.json(openApiDocument(o.version));
  });
  return router;
}
