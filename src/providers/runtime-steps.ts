import type { Operation, Plan } from '../plan/plan.js';
import type { Reading } from '../plan/reading.js';

/** The operations HAProxy's runtime API can carry out: servers, and the SNI and allow maps' entries. */
export type RuntimeOp = Extract<
  Operation,
  {
    kind:
      | 'create_server'
      | 'update_server'
      | 'delete_server'
      | 'set_map_entry'
      | 'delete_map_entry'
      | 'add_allow_entry'
      | 'delete_allow_entry';
  }
>;

/** Balance algorithms HAProxy can add servers to at runtime. */
export const DYNAMIC_BALANCE: ReadonlySet<string> = new Set(['leastconn', 'roundrobin', 'first', 'random']);

/**
 * The plan's operations when every one of them can run at runtime, with no reload: servers of backends that
 * exist with a dynamic balance and that only a map routes to (no rule, no default names them), whose check
 * setting stays (it is fixed when a server is created), and entries of SNI maps HAProxy runs. Else
 * undefined: the plan is written to the files and reloaded. Pure; one lookup per operation.
 */
export function runtimeSteps(plan: Plan, from: Reading): RuntimeOp[] | undefined {
  const running = new Set((from.state.maps ?? []).map((m) => m.name));
  if (running.size === 0) return undefined;
  const named = new Set(
    from.state.frontends.flatMap((f) => [...f.rules.map((r) => r.backend), f.defaultBackend ?? '']),
  );
  const steps: RuntimeOp[] = [];
  for (const op of plan.operations) {
    switch (op.kind) {
      case 'set_map_entry':
        if (!running.has(op.map) || !from.backend(op.backend)) return undefined;
        steps.push(op);
        break;
      case 'delete_map_entry':
      case 'add_allow_entry':
      case 'delete_allow_entry':
        if (!running.has(op.map)) return undefined;
        steps.push(op);
        break;
      case 'create_server':
      case 'update_server':
      case 'delete_server': {
        const b = from.backend(op.backend);
        if (!b || !DYNAMIC_BALANCE.has(b.balance) || named.has(b.name)) return undefined;
        if (op.kind === 'update_server') {
          const s = b.servers.find((x) => x.name === op.server.name);
          if (!s || s.check !== op.server.check) return undefined;
        }
        steps.push(op);
        break;
      }
      default:
        return undefined;
    }
  }
  return steps;
}

/**
 * Requests `ops` take through the Data Plane API (`dataplaneapi/runtime.ts`): a new server two (add, then
 * ready), a delete two (maintenance, then delete), a move four (a delete and an add: runtime servers have
 * no address change of their own), a map or allow-map entry one.
 */
export function runtimeRequests(ops: readonly RuntimeOp[]): number {
  let n = 0;
  for (const op of ops)
    n += op.kind === 'update_server' ? 4 : op.kind === 'create_server' || op.kind === 'delete_server' ? 2 : 1;
  return n;
}
