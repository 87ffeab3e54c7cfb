import type { Plan } from '../../plan/plan.js';
import type { Reading } from '../../plan/reading.js';
import { type RuntimeOp, runtimeRequests, runtimeSteps } from '../runtime-steps.js';

/** An endpoint move done in place: the server keeps its name, HAProxy sets its new address. */
export type Move = Extract<RuntimeOp, { kind: 'update_server' }>;

/**
 * How a plan reaches HAProxy through the Data Plane API, one of three (`docs/DATAPLANEAPI.md`):
 * - `runtime`: servers and map entries through the runtime endpoints, no reload; the files follow, batched
 *   (`runtime.ts`, `persist.ts`);
 * - `moves`: endpoint moves of servers that carry a stream (the runtime cannot delete those), in place: the
 *   files written with the new addresses and `X-Runtime-Actions`, no reload (`files.ts`);
 * - `reload`: anything else (the frontend, new slots, deletions, every change on HAProxy 2.6): the files
 *   written and loaded by one reload (`files.ts`).
 */
export type Path =
  | { kind: 'runtime'; steps: RuntimeOp[] }
  | { kind: 'moves'; moves: Move[] }
  | { kind: 'reload' };

export interface PathFacts {
  /** HAProxy takes servers at runtime through the API (3.0 and newer); undefined until known (counts as able). */
  runtimeServers: boolean | undefined;
  /** Servers (`backend/server`) found carrying a stream when a move tried to delete them. */
  busy: ReadonlySet<string>;
  /**
   * The most runtime requests one plan sends before one write of the files and one reload is the cheaper
   * (slots in the API's storage only: a burst of new clusters); undefined: no bound.
   */
  maxRuntimeRequests: number | undefined;
}

/** The one choice of path for a plan. Pure. */
export function choosePath(plan: Plan, from: Reading, facts: PathFacts): Path {
  const steps = facts.runtimeServers === false ? undefined : runtimeSteps(plan, from);
  if (!steps) return { kind: 'reload' };
  const busy = (op: RuntimeOp) =>
    op.kind === 'update_server' && facts.busy.has(`${op.backend}/${op.server.name}`);
  if (steps.some(busy))
    return steps.every((op) => op.kind === 'update_server')
      ? { kind: 'moves', moves: steps as Move[] }
      : { kind: 'reload' };
  const most = facts.maxRuntimeRequests;
  if (most !== undefined && runtimeRequests(steps) > most) return { kind: 'reload' };
  return { kind: 'runtime', steps };
}
