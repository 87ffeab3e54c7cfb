import express, { type NextFunction, type Request, type Response } from 'express';
import type { Logger } from 'pino';
import type { ZodError } from 'zod';
import type { Metrics } from '../metrics/metrics.js';
import type { PassOutcome, Reconciler } from '../reconcile/reconciler.js';
import type { ClusterStore } from '../store/cluster-store.js';
import type { WebhookAuthenticator } from './auth.js';
import { checkCluster, checkClusterSet, type FieldError } from './clusters.js';
import { openApiDocument } from './openapi.js';
import { ClusterBody, ClusterSetBody } from './schemas.js';

export interface Readiness {
  ready: boolean;
  checks: Record<string, { ok: boolean; detail?: string }>;
}

export interface AppOptions {
  store: ClusterStore;
  reconciler: Reconciler;
  metrics: Metrics;
  logger: Logger;
  auth: WebhookAuthenticator;
  /** Longest a `?wait=true` call waits for its change to be applied. */
  waitTimeoutMs: number;
  bodyLimitBytes: number;
  readiness(): Promise<Readiness>;
  version: string;
}

type Handler = (req: Request, res: Response) => Promise<void>;

function fieldError(res: Response, e: FieldError): void {
  res.status(e.status).json({ error: 'invalid_request', field: e.field, reason: e.reason, detail: e.detail });
}

function zodError(res: Response, err: ZodError, prefix = ''): void {
  const issues = err.issues.map((i) => ({
    field: prefix + (i.code === 'unrecognized_keys' ? [...i.path, ...i.keys].join('.') : i.path.join('.')),
    reason: i.code,
    detail: i.message,
  }));
  const first = issues[0] ?? { field: '', reason: 'invalid', detail: 'invalid body' };
  res.status(400).json({ error: 'invalid_request', ...first, issues });
}

/** The webhook API, health endpoints and metrics. Every /v1 call is authenticated before its body is read. */
export function createApp(o: AppOptions): express.Express {
  const app = express();
  app.disable('x-powered-by');
  app.set('query parser', 'simple');

  // Counted by route template, never by path, so that labels stay bounded.
  app.use((req, res, next) => {
    const started = process.hrtime.bigint();
    res.on('finish', () => {
      const route = req.route?.path ? `${req.baseUrl}${String(req.route.path)}` : 'unmatched';
      o.metrics.webhookRequests.inc({ method: req.method, route, status: String(res.statusCode) });
      o.logger.info(
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
  });

  app.get('/healthz', (_req, res) => {
    res.json({ status: 'ok' });
  });
  app.get('/readyz', async (_req, res) => {
    const r = await o.readiness();
    res.status(r.ready ? 200 : 503).json(r);
  });
  app.get('/metrics', async (_req, res) => {
    res.type(o.metrics.registry.contentType).send(await o.metrics.registry.metrics());
  });
  app.get('/openapi.json', (_req, res) => {
    res.json(openApiDocument(o.version));
  });

  const v1 = express.Router();
  v1.use(express.raw({ type: () => true, limit: o.bodyLimitBytes }));
  v1.use((req, res, next) => {
    const body = Buffer.isBuffer(req.body) ? req.body : Buffer.alloc(0);
    const result = o.auth.check({
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
        res
          .status(400)
          .json({ error: 'invalid_request', field: '', reason: 'invalid_json', detail: 'body is not JSON' });
        return;
      }
    } else {
      req.body = undefined;
    }
    next();
  });

  const answer = async (req: Request, res: Response, outcome: Promise<PassOutcome>, body: () => unknown) => {
    if (req.query.wait !== 'true') {
      res.status(202).json(body());
      return;
    }
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<'timeout'>((resolve) => {
      timer = setTimeout(() => resolve('timeout'), o.waitTimeoutMs);
    });
    const result = await Promise.race([outcome, timeout]);
    clearTimeout(timer);
    if (result === 'timeout') {
      res.status(202).json({ ...(body() as object), wait: 'timed_out' });
      return;
    }
    res
      .status(result.ok ? 200 : 502)
      .json({ ...(body() as object), ...(result.ok ? {} : { error: result.error }) });
  };
  const status = (name: string) => o.reconciler.statuses().find((s) => s.name === name);

  const upsert: Handler = async (req, res) => {
    const name = String(req.params.name);
    const parsed = ClusterBody.safeParse(req.body);
    if (!parsed.success) return zodError(res, parsed.error);
    const checked = checkCluster(name, parsed.data);
    if (!checked.ok) return fieldError(res, checked.error);
    if (checked.routed) await o.store.upsert(checked.input);
    else await o.store.delete(name);
    const outcome = o.reconciler.request('webhook');
    await answer(req, res, outcome, () => status(name) ?? { name, routed: false });
  };

  const remove: Handler = async (req, res) => {
    const name = String(req.params.name);
    const existed = await o.store.delete(name);
    await answer(req, res, o.reconciler.request('webhook'), () => ({ name, deleted: existed }));
  };

  const replaceAll: Handler = async (req, res) => {
    const parsed = ClusterSetBody.safeParse(req.body);
    if (!parsed.success) return zodError(res, parsed.error);
    const checked = checkClusterSet(parsed.data);
    if (!checked.ok) return fieldError(res, checked.error);
    const { inputs } = checked;
    const { removed } = await o.store.replaceAll(inputs);
    await answer(req, res, o.reconciler.request('sync'), () => ({ clusters: inputs.length, removed }));
  };

  v1.get('/clusters', async (_req, res) => {
    res.json({ clusters: o.reconciler.statuses() });
  });
  v1.put('/clusters', replaceAll);
  v1.get('/clusters/:name', async (req, res) => {
    const s = status(String(req.params.name));
    if (!s) {
      res.status(404).json({ error: 'not_found', detail: `no cluster ${req.params.name}` });
      return;
    }
    res.json(s);
  });
  v1.put('/clusters/:name', upsert);
  v1.delete('/clusters/:name', remove);
  v1.get('/plan', async (_req, res) => {
    const { plan, text } = await o.reconciler.preview();
    res.json({ text, operations: plan.operations, conflicts: plan.conflicts });
  });
  v1.post('/reconcile', async (req, res) => {
    await answer(req, res, o.reconciler.request('api'), () => ({ requested: true }));
  });
  app.use('/v1', v1);

  app.use((_req: Request, res: Response) => {
    res.status(404).json({ error: 'not_found' });
  });
  app.use(
    (err: Error & { status?: number; type?: string }, _req: Request, res: Response, _next: NextFunction) => {
      if (err.type === 'entity.too.large') {
        res
          .status(413)
          .json({ error: 'payload_too_large', detail: `body is larger than ${o.bodyLimitBytes} bytes` });
        return;
      }
      o.logger.error({ err }, 'request failed');
      res.status(err.status && err.status < 500 ? err.status : 500).json({ error: 'internal_error' });
    },
  );
  return app;
}
