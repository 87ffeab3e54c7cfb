import { edgeText, REFUSALS_TABLE } from '../haproxy/edge.js';
import type {
  BackendState,
  DesiredConfig,
  DesiredFrontend,
  DesiredServer,
  FrontendState,
  HaproxyState,
  ServerState,
  SwitchingRule,
} from '../haproxy/model.js';
import { serverSlotName, serverSlotNumber } from '../naming/names.js';
import { endpointKey } from '../routes/endpoint.js';
import { compareStrings } from '../routes/route.js';
import type { AllowStage, Conflict, FieldChange, Operation, Plan, PlanOptions } from './operations.js';
import { isSlot, planRouting } from './slots.js';

export type {
  AllowStage,
  BackendSettings,
  Conflict,
  ConflictKind,
  FieldChange,
  Operation,
  Plan,
  PlanOptions,
} from './operations.js';

// Creations come before what references them: a slot's servers and its allow keys before its map entry,
// map entries removed before their slot's servers and keys; rules go before the backends they referenced.
const ORDER: Record<Exclude<Operation['kind'], 'add_allow_entry' | 'delete_allow_entry'>, number> = {
  create_frontend: 0,
  update_frontend: 1,
  create_backend: 2,
  update_backend: 3,
  create_server: 4,
  update_server: 5,
  delete_map_entry: 10,
  set_map_entry: 11,
  delete_server: 13,
  set_switching_rules: 14,
  delete_frontend: 15,
  delete_backend: 16,
};
// The allow map's stages (`AllowStage`, `allow.ts`) around the SNI map's changes.
const STAGE: Record<AllowStage, number> = { open: 6, entry: 7, flag: 8, after: 12 };

/** Where an operation goes in a plan. */
export function operationRank(op: Operation): number {
  return op.kind === 'add_allow_entry' || op.kind === 'delete_allow_entry' ? STAGE[op.stage] : ORDER[op.kind];
}

/**
 * Diffs what the service wants against what HAProxy has. Pure and deterministic. Only objects the registry
 * found owned are ever updated or deleted; a desired object whose name is taken by a foreign object is
 * reported as a conflict and left out, never overwritten. Owned objects the desired state has no place for
 * (per-cluster backends and their `use_backend` rules, which installs before map routing wrote) are deleted:
 * an upgrade routes every cluster by the map in the same plan that removes them.
 */
export function plan(desired: DesiredConfig, current: HaproxyState, options: PlanOptions = {}): Plan {
  const conflicts: Conflict[] = [];
  const ops: Operation[] = [];
  if (!planHead(desired, current, ops, conflicts)) return { operations: [], conflicts };
  const pool = planRouting(desired.routing, current, options.grow ?? 'ahead', planServers, ops);
  planTail(desired, current, ops);
  return { operations: sortOperations(ops), conflicts, pool };
}

/**
 * Everything of `plan` but the slots' servers and map entries: the frontend, rules and what is deleted. A
 * state where this is empty (no operation, no foreign frontend under our name) can be planned host by host
 * (`src/plan/scoped.ts`).
 */
export function planStructure(
  desired: DesiredConfig,
  current: HaproxyState,
): { operations: Operation[]; conflicts: Conflict[]; blocked: boolean } {
  const conflicts: Conflict[] = [];
  const ops: Operation[] = [];
  if (!planHead(desired, current, ops, conflicts)) return { operations: [], conflicts, blocked: true };
  planTail(desired, current, ops);
  return { operations: sortOperations(ops), conflicts, blocked: false };
}

/** A stable sort by kind: within one kind, operations keep the order they were planned in. */
export function sortOperations(ops: Operation[]): Operation[] {
  return ops.sort((a, b) => operationRank(a) - operationRank(b));
}

/** The frontend and its rules; false when a foreign frontend holds our name (nothing applies). */
function planHead(
  desired: DesiredConfig,
  current: HaproxyState,
  ops: Operation[],
  conflicts: Conflict[],
): boolean {
  const currentFrontend = current.frontends.find((f) => f.name === desired.frontend.name);
  if (currentFrontend && !currentFrontend.owned) {
    conflicts.push({
      kind: 'frontend_not_owned',
      name: desired.frontend.name,
      detail: `frontend ${desired.frontend.name} exists but is not owned by this service; nothing is applied`,
    });
    return false;
  }
  const fallback = desired.frontend.defaultBackend;
  const defaultBackend = fallback === null ? undefined : current.backends.find((b) => b.name === fallback);
  const frontend = planFrontend(desired.frontend, currentFrontend, defaultBackend, ops, conflicts);
  planRules(frontend.name, currentFrontend, ops);
  return true;
}

/** Owned frontends and backends the desired state no longer has (slot backends stay: the pool keeps them). */
function planTail(desired: DesiredConfig, current: HaproxyState, ops: Operation[]): void {
  for (const f of current.frontends) {
    if (f.owned && f.name !== desired.frontend.name) ops.push({ kind: 'delete_frontend', name: f.name });
  }
  const refusals = desired.frontend.edge.refusals;
  for (const b of current.backends) {
    if (b.owned && !isSlot(desired.routing, b.name) && b.name !== refusals)
      ops.push({ kind: 'delete_backend', name: b.name });
  }
  // The refusals table (`edge.ts`) lives in a backend of its own, made once.
  if (!current.backends.some((b) => b.name === refusals))
    ops.push({ kind: 'create_backend', backend: { name: refusals, balance: '', table: REFUSALS_TABLE } });
}

/** The frontend's own settings; a default backend must be an existing backend of another owner. */
function planFrontend(
  desired: DesiredFrontend,
  current: FrontendState | undefined,
  fallback: BackendState | undefined,
  ops: Operation[],
  conflicts: Conflict[],
): DesiredFrontend {
  let defaultBackend = desired.defaultBackend;
  if (defaultBackend !== null && (!fallback || fallback.owned)) {
    conflicts.push({
      kind: 'default_backend_missing',
      name: defaultBackend,
      detail: `default backend ${defaultBackend} is not an existing backend of another owner; unmatched SNI is closed instead`,
    });
    defaultBackend = null;
  }
  const frontend: DesiredFrontend = { ...desired, defaultBackend };
  if (!current) {
    ops.push({ kind: 'create_frontend', frontend });
    return frontend;
  }
  const changes = diffFields([
    ['bind', bindText(current.bind), bindText(frontend.bind)],
    ['inspect_delay', String(current.inspectDelayMs), String(frontend.inspectDelayMs)],
    ['accept_tls_hello', String(current.acceptsTlsHello), 'true'],
    ['default_backend', String(current.defaultBackend), String(frontend.defaultBackend)],
    ['sni_map', String(current.sniMap ?? null), frontend.sniMap],
    ['edge', edgeText(current.edge), edgeText(frontend.edge)],
  ]);
  if (changes.length > 0) ops.push({ kind: 'update_frontend', frontend, changes });
  return frontend;
}

/** Our frontend routes by its map alone: rules of ours (an install before map routing) go, foreign ones stay. */
function planRules(frontend: string, current: FrontendState | undefined, ops: Operation[]): void {
  const currentRules = current?.rules ?? [];
  const removed: SwitchingRule[] = currentRules
    .filter((r) => r.owned)
    .map((r) => ({ backend: r.backend, host: r.host, owned: true }));
  if (removed.length === 0) return;
  const rules = currentRules
    .filter((r) => !r.owned)
    .map((r) => ({ backend: r.backend, host: r.host, owned: false }));
  ops.push({ kind: 'set_switching_rules', frontend, rules, added: [], removed });
}

/**
 * Servers are matched by address and port first; desired endpoints left over then take over the slots of
 * servers left over (an address change becomes one update, which HAProxy can apply without a reload);
 * only then are new slots created or old ones deleted.
 */
export function planServers(
  backend: string,
  want: readonly DesiredServer[],
  have: readonly ServerState[],
  ops: Operation[],
): void {
  if (sameServers(want, have)) return;
  const spare = have.filter((s) => s.owned).sort(bySlot);
  const unmatched: DesiredServer[] = [];
  for (const w of want) {
    const i = spare.findIndex((s) => s.address === w.address && s.port === w.port);
    if (i < 0) {
      unmatched.push(w);
      continue;
    }
    const [s] = spare.splice(i, 1);
    // One in maintenance takes no traffic: planned again (the runtime path deletes it and adds it ready).
    if (s && (s.check !== w.check || s.maint)) {
      ops.push({
        kind: 'update_server',
        backend,
        server: spec(s, { check: w.check }),
        changes: diffFields([
          ['check', String(s.check), String(w.check)],
          ['state', s.maint ? 'maint' : 'ready', 'ready'],
        ]),
      });
    }
  }
  const taken = new Set(have.map((s) => s.name));
  let nextSlot = 1;
  for (const w of unmatched) {
    const reuse = spare.shift();
    if (reuse) {
      ops.push({
        kind: 'update_server',
        backend,
        server: spec(reuse, w),
        changes: diffFields([
          ['address', reuse.address, w.address],
          ['port', String(reuse.port), String(w.port)],
          ['check', String(reuse.check), String(w.check)],
        ]),
      });
      continue;
    }
    while (taken.has(serverSlotName(nextSlot))) nextSlot++;
    const name = serverSlotName(nextSlot);
    taken.add(name);
    ops.push({ kind: 'create_server', backend, server: { name, ...w } });
  }
  for (const s of spare) ops.push({ kind: 'delete_server', backend, server: spec(s, {}) });
}

/** A server as an operation names it: its name and endpoint, `changed` applied. */
function spec(s: ServerState, changed: Partial<DesiredServer>) {
  return {
    name: s.name,
    address: changed.address ?? s.address,
    port: changed.port ?? s.port,
    check: changed.check ?? s.check,
  };
}

/** Every server already there as wanted, in the same order: nothing to plan (most routes, most passes). */
function sameServers(want: readonly DesiredServer[], have: readonly ServerState[]): boolean {
  if (want.length !== have.length) return false;
  for (let i = 0; i < want.length; i++) {
    const w = want[i] as DesiredServer;
    const h = have[i] as ServerState;
    if (!h.owned || h.maint || h.address !== w.address || h.port !== w.port || h.check !== w.check)
      return false;
  }
  return true;
}

function bySlot(a: ServerState, b: ServerState): number {
  const sa = serverSlotNumber(a.name) ?? Number.MAX_SAFE_INTEGER;
  const sb = serverSlotNumber(b.name) ?? Number.MAX_SAFE_INTEGER;
  return sa - sb || compareStrings(a.name, b.name);
}

function diffFields(fields: Array<[string, string, string]>): FieldChange[] {
  return fields.filter(([, from, to]) => from !== to).map(([field, from, to]) => ({ field, from, to }));
}

export function bindText(bind: { address: string; port: number; acceptProxy?: boolean } | null): string {
  return bind ? `${endpointKey(bind)}${bind.acceptProxy ? ' accept-proxy' : ''}` : 'none';
}
