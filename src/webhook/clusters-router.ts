import express, { type NextFunction, type Request, type Response } from 'express';
import { NotLeadingError } from '../fleet/fleet.js';
import { type Loop, type PassOutcome, TopologyNotSyncedError } from '../reconcile/reconciler.js';
import { type DesiredStore, StaleWriteError, type WriteStamp } from '../store/desired-store.js';
import { checkCluster, checkClusterSet, checkName } from './clusters.js';
import { fieldError, zodError } from './errors.js';
import type { Readiness } from './readiness.js';
import { ClusterBody, ClusterSetBody } from './schemas.js';

export interface ClustersRouterOptions {
  store: DesiredStore;
  reconciler: Loop;
  waitTimeoutMs: number;
  readiness(): Promise<Readiness>;
  /** The verified signed write a request is (HMAC mode), which orders it against other replicas' writes. */
  stampOf?(req: Request): WriteStamp | undefined;
}

type Handler = (req: Request, res: Response) => Promise<void>;

/** The /v1 routes, behind authentication: clusters, the plan, reconcile and detailed readiness. */
export function clustersRouter(o: ClustersRouterOptions): express.Router {
  const router = express.Router();
  const status = (name: string) => o.reconciler.status(name);

  // 202 at once, or with ?wait=true the outcome of the pass (bounded by waitTimeoutMs). `verdict` turns a
  // successful pass into the call's own status: a pass can succeed while this cluster's claim was refused.
  const answer = async (
    req: Request,
    res: Response,
    outcome: Promise<PassOutcome>,
    body: () => unknown,
    verdict: (body: unknown) => number = () => 200,
  ) => {
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
    const answered = body();
    res
      .status(result.ok ? verdict(answered) : 502)
      .json({ ...(answered as object), ...(result.ok ? {} : { error: result.error }) });
  };
  // 200 means the route is in HAProxy (degraded: with no endpoints yet); a refused claim is a 409.
  const clusterVerdict = (answered: unknown) => {
    const state = (answered as { state?: string }).state;
    return state === 'rejected' ? 409 : state === 'error' ? 502 : 200;
  };
  // Nothing is acknowledged that was not stored: a store that cannot write answers 503.
  const stored = async <T>(res: Response, write: () => Promise<T>): Promise<T | undefined> => {
    try {
      return await write();
    } catch (err) {
      if (err instanceof StaleWriteError) {
        // A replayed (or overtaken) signed write, received by another replica than the newer one was.
        res.status(409).json({ error: 'stale_write', reason: 'replayed_or_older', detail: err.message });
        return undefined;
      }
      res.status(503).json({
        error: 'state_unavailable',
        detail: `the change could not be stored: ${err instanceof Error ? err.message : String(err)}`,
      });
      return undefined;
    }
  };

  const upsert: Handler = async (req, res) => {
    const name = String(req.params.name);
    const parsed = ClusterBody.safeParse(req.body);
    if (!parsed.success) return zodError(res, parsed.error);
    const checked = checkCluster(name, parsed.data);
    if (!checked.ok) return fieldError(res, checked.error);
    const input = checked.routed ? checked.input : undefined;
    const stamp = o.stampOf?.(req);
    const ok = await stored<unknown>(res, () =>
      input ? o.store.upsert(input, stamp) : o.store.delete(name, stamp),
    );
    if (ok === undefined) return;
    const outcome = o.reconciler.request('webhook', { clusters: [name] });
    await answer(req, res, outcome, () => status(name) ?? { name, routed: false }, clusterVerdict);
  };

  const remove: Handler = async (req, res) => {
    const name = String(req.params.name);
    const badName = checkName(name);
    if (badName) return fieldError(res, badName);
    const existed = await stored(res, () => o.store.delete(name, o.stampOf?.(req)));
    if (existed === undefined) return;
    const outcome = o.reconciler.request('webhook', { clusters: [name] });
    await answer(req, res, outcome, () => ({ name, deleted: existed }));
  };

  const replaceAll: Handler = async (req, res) => {
    const parsed = ClusterSetBody.safeParse(req.body);
    if (!parsed.success) return zodError(res, parsed.error);
    const checked = checkClusterSet(parsed.data);
    if (!checked.ok) return fieldError(res, checked.error);
    const { inputs } = checked;
    const replaced = await stored(res, () => o.store.replaceAll(inputs, o.stampOf?.(req)));
    if (replaced === undefined) return;
    const { removed } = replaced;
    await answer(req, res, o.reconciler.request('sync'), () => ({ clusters: inputs.length, removed }));
  };

  router.get('/clusters', async (_req, res) => {
    res.json({ clusters: o.reconciler.statuses() });
  });
  router.put('/clusters', replaceAll);
  router.get('/clusters/:name', async (req, res) => {
    const badName = checkName(String(req.params.name));
    if (badName) return fieldError(res, badName);
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
    try {
      const { plan, text, routes } = await o.reconciler.preview();
      res.json({
        text,
        operations: plan.operations,
        conflicts: plan.conflicts,
        // host -> backend -> servers once the plan is applied (with map routing, the slot each host takes).
        routes: [...routes].map(([cluster, r]) => ({ cluster, ...r })),
      });
    } catch (err) {
      // Only the leader reads HAProxy: a standby says so (with leader election), as an unread topology does.
      if (err instanceof NotLeadingError) {
        res.status(503).json({ error: 'not_leader', detail: err.message });
        return;
      }
      if (!(err instanceof TopologyNotSyncedError)) throw err;
      res.status(503).json({ error: 'topology_not_synced', detail: err.message });
    }
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
