import express, { type NextFunction, type Request, type Response } from 'express';
import type { PassOutcome, Reconciler } from '../reconcile/reconciler.js';
import type { ClusterStore } from '../store/cluster-store.js';
import type { Readiness } from './app.js';
import { checkCluster } from './clusters.js';
import { fieldError, zodError } from './errors.js';
import { ClusterBody, ClusterSetBody } from './schemas.js';

export interface ClustersRouterOptions {
  store: ClusterStore;
  reconciler: Reconciler;
  waitTimeoutMs: number;
  readiness(): Promise<Readiness>;
}

type Handler = (req: Request, res: Response) => Promise<void>;

/** The /v1 routes, behind authentication: clusters, the plan, reconcile and detailed readiness. */
export function clustersRouter(o: ClustersRouterOptions): express.Router {
  const router = express.Router();
  const status = (name: string) => o.reconciler.statuses().find((s) => s.name === name);

  // 202 at once, or with ?wait=true the outcome of the pass (bounded by waitTimeoutMs).
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
    const inputs = [];
    const names = new Set<string>();
    for (const [i, { name, ...body }] of parsed.data.clusters.entries()) {
      if (names.has(name)) {
        return fieldError(res, {
          status: 422,
          field: `clusters.${i}.name`,
          reason: 'duplicate_name',
          detail: `cluster ${name} is listed twice`,
        });
      }
      names.add(name);
      const checked = checkCluster(name, body, `clusters.${i}.`);
      if (!checked.ok) return fieldError(res, checked.error);
      if (checked.routed) inputs.push(checked.input);
    }
    const { removed } = await o.store.replaceAll(inputs);
    await answer(req, res, o.reconciler.request('sync'), () => ({ clusters: inputs.length, removed }));
  };

  router.get('/clusters', async (_req, res) => {
    res.json({ clusters: o.reconciler.statuses() });
  });
  router.put('/clusters', replaceAll);
  router.get('/clusters/:name', async (req, res) => {
    const s = status(String(req.params.name));
    if (!s) {
      res.status(404).json({ error: 'not_found', detail: `no cluster ${req.params.name}` });
      return;
    }
    res.json(s);
  });
  router.put('/clusters/:name', upsert);
  router.delete('/clusters/:name', remove);
  router.get('/plan', async (_req, res) => {
    const { plan, text } = await o.reconciler.preview();
    res.json({ text, operations: plan.operations, conflicts: plan.conflicts });
  });
  router.post('/reconcile', async (req, res) => {
    await answer(req, res, o.reconciler.request('api'), () => ({ requested: true }));
  });
  router.get('/readyz', async (_req, res) => {
    const r = await o.readiness();
    res.status(r.ready ? 200 : 503).json(r);
  });
  // The router decodes :name before any handler runs, and throws a URIError on bad percent-encoding
  // (`%`, `a%zz`): the caller's mistake, not a server error.
  router.use((err: unknown, _req: Request, res: Response, next: NextFunction) => {
    if (!(err instanceof URIError)) return next(err);
    res.status(400).json({
      error: 'invalid_request',
      field: 'name',
      reason: 'bad_percent_encoding',
      detail: 'the cluster name in the path is not valid percent-encoded UTF-8',
    });
  });
  return router;
}
