import type {
  BackendState,
  DesiredBackend,
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
import type { BackendSettings, Conflict, FieldChange, Operation, Plan, PlanOptions } from './operations.js';
import { isSlot, planRouting } from './slots.js';

export type {
  BackendSettings,
  Conflict,
  ConflictKind,
  FieldChange,
  Operation,
  Plan,
  PlanOptions,
} from './operations.js';

// Creations come before what references them: a slot's servers before its map entry, map entries removed
// before their slot's servers; rules go before the backends they referenced.
const ORDER: Record<Operation['kind'], number> = {
  create_frontend: 0,
  update_frontend: 1,
  create_backend: 2,
  update_backend: 3,
  create_server: 4,
  update_server: 5,
  delete_map_entry: 6,
  set_map_entry: 7,
  delete_server: 8,
  set_switching_rules: 9,
  delete_frontend: 10,
  delete_backend: 11,
};

/**
 * Diffs what the service wants against what HAProxy has. Pure and deterministic. Only objects tagged as
 * owned are ever updated or deleted; a desired object whose name is taken by a foreign object is reported
 * as a conflict and left out, never overwritten.
 */
export function plan(desired: DesiredConfig, current: HaproxyState, options: PlanOptions = {}): Plan {
  const conflicts: Conflict[] = [];
  const ops: Operation[] = [];
  if (!planHead(desired, current, ops, conflicts)) return { operations: [], conflicts };
  const routing = desired.routing;
  const pool = routing && planRouting(routing, current, options.grow ?? 'ahead', planServers, ops);
  planTail(desired, current, ops);
  const operations = sortOperations(ops);
  return pool ? { operations, conflicts, pool } : { operations, conflicts };
}

/**
 * Everything of `plan` but map routing's slots, servers and map entries: the frontend, per-cluster backends,
 * rules, and what is deleted. With map routing, a state where this is empty (no operation, no foreign
 * frontend under our name) can be planned host by host (`src/plan/scoped.ts`).
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
  return ops.sort((a, b) => ORDER[a.kind] - ORDER[b.kind]);
}

/** The frontend, the backends and the rules; false when a foreign frontend holds our name (nothing applies). */
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
  // Map routing wants no per-cluster backend: the index of every backend is then not worth building.
  const backends: ReadonlyMap<string, BackendState> =
    desired.backends.length > 0
      ? new Map(current.backends.map((b) => [b.name, b]))
      : new Map(
          current.backends.filter((b) => b.name === desired.frontend.defaultBackend).map((b) => [b.name, b]),
        );
  const frontend = planFrontend(desired.frontend, currentFrontend, backends, ops, conflicts);

  const placed = new Set<string>();
  for (const want of desired.backends) {
    const have = backends.get(want.name);
    if (have && !have.owned) {
      conflicts.push({
        kind: 'backend_not_owned',
        name: want.name,
        detail: `backend ${want.name} exists but is not owned by this service; cluster ${want.cluster} is not routed`,
      });
      continue;
    }
    placed.add(want.name);
    planBackend(want, have, ops);
  }
  planRules(frontend.name, desired.frontend.rules, placed, currentFrontend, ops);
  return true;
}

/** Owned frontends and backends the desired state no longer has (slot backends stay: the pool keeps them). */
function planTail(desired: DesiredConfig, current: HaproxyState, ops: Operation[]): void {
  for (const f of current.frontends) {
    if (f.owned && f.name !== desired.frontend.name) ops.push({ kind: 'delete_frontend', name: f.name });
  }
  const wanted = new Set(desired.backends.map((b) => b.name));
  for (const b of current.backends) {
    if (b.owned && !wanted.has(b.name) && !isSlot(desired.routing, b.name))
      ops.push({ kind: 'delete_backend', name: b.name });
  }
}

/** The frontend's own settings; a default backend must be an existing backend of another owner. */
function planFrontend(
  desired: DesiredFrontend,
  current: FrontendState | undefined,
  backends: ReadonlyMap<string, BackendState>,
  ops: Operation[],
  conflicts: Conflict[],
): Omit<DesiredFrontend, 'rules'> {
  let defaultBackend = desired.defaultBackend;
  if (defaultBackend !== null) {
    const target = backends.get(defaultBackend);
    if (!target || target.owned) {
      conflicts.push({
        kind: 'default_backend_missing',
        name: defaultBackend,
        detail: `default backend ${defaultBackend} is not an existing backend of another owner; unmatched SNI is closed instead`,
      });
      defaultBackend = null;
    }
  }
  const sniMap = desired.sniMap ?? null;
  const frontend = {
    name: desired.name,
    bind: desired.bind,
    inspectDelayMs: desired.inspectDelayMs,
    defaultBackend,
    ...(sniMap !== null ? { sniMap } : {}),
  };
  if (!current) {
    ops.push({ kind: 'create_frontend', frontend });
    return frontend;
  }
  const changes = diffFields([
    ['bind', bindText(current.bind), bindText(frontend.bind)],
    ['inspect_delay', String(current.inspectDelayMs), String(frontend.inspectDelayMs)],
    ['accept_tls_hello', String(current.acceptsTlsHello), 'true'],
    ['default_backend', String(current.defaultBackend), String(frontend.defaultBackend)],
    ['sni_map', String(current.sniMap ?? null), String(sniMap)],
  ]);
  if (changes.length > 0) ops.push({ kind: 'update_frontend', frontend, changes });
  return frontend;
}

/** Our rules for the backends that could be placed, in order, then foreign rules in theirs. */
function planRules(
  frontend: string,
  desired: DesiredFrontend['rules'],
  placed: ReadonlySet<string>,
  current: FrontendState | undefined,
  ops: Operation[],
): void {
  const ownRules: SwitchingRule[] = desired
    .filter((r) => placed.has(r.backend))
    .map((r) => ({ ...r, owned: true }));
  const foreignRules = current?.rules.filter((r) => !r.owned) ?? [];
  const rules = [...ownRules, ...foreignRules];
  const currentRules = current?.rules ?? [];
  if (sameRules(rules, currentRules)) return;
  const key = (r: SwitchingRule) => `${r.owned}|${r.backend}|${r.host}`;
  const before = new Set(currentRules.map(key));
  const after = new Set(rules.map(key));
  ops.push({
    kind: 'set_switching_rules',
    frontend,
    rules,
    added: rules.filter((r) => !before.has(key(r))),
    removed: currentRules.filter((r) => !after.has(key(r))),
  });
}

function planBackend(want: DesiredBackend, have: BackendState | undefined, ops: Operation[]): void {
  const settings: BackendSettings = { name: want.name, cluster: want.cluster, balance: want.balance };
  if (!have) {
    ops.push({ kind: 'create_backend', backend: settings });
  } else {
    const changes = diffFields([
      ['balance', have.balance, want.balance],
      ['cluster', String(have.cluster), want.cluster],
    ]);
    if (changes.length > 0) ops.push({ kind: 'update_backend', backend: settings, changes });
  }
  planServers(want.name, want.servers, have?.servers ?? [], ops);
}

/**
 * Servers are matched by address and port first; desired endpoints left over then take over the slots of
 * servers left over (an address change becomes one update, which HAProxy can apply without a reload);
 * only then are new slots created or old ones deleted.
 */
export function planServers(
  backend: string,
  want: DesiredServer[],
  have: ServerState[],
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
    if (s && s.check !== w.check) {
      ops.push({
        kind: 'update_server',
        backend,
        server: { ...s, check: w.check },
        changes: [{ field: 'check', from: String(s.check), to: String(w.check) }],
      });
    }
  }
  const taken = new Set(have.map((s) => s.name));
  let nextSlot = 1;
  for (const w of unmatched) {
    const reuse = spare.shift();
    if (reuse) {
      const server = { ...reuse, address: w.address, port: w.port, check: w.check };
      ops.push({
        kind: 'update_server',
        backend,
        server,
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
    ops.push({ kind: 'create_server', backend, server: { name, ...w, owned: true } });
  }
  for (const s of spare) ops.push({ kind: 'delete_server', backend, server: s });
}

/** Every server already there as wanted, in the same order: nothing to plan (most routes, most passes). */
function sameServers(want: readonly DesiredServer[], have: readonly ServerState[]): boolean {
  if (want.length !== have.length) return false;
  for (let i = 0; i < want.length; i++) {
    const w = want[i] as DesiredServer;
    const h = have[i] as ServerState;
    if (!h.owned || h.address !== w.address || h.port !== w.port || h.check !== w.check) return false;
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

export function bindText(bind: { address: string; port: number } | null): string {
  return bind ? endpointKey(bind) : 'none';
}

function sameRules(a: SwitchingRule[], b: SwitchingRule[]): boolean {
  return (
    a.length === b.length &&
    a.every((r, i) => r.backend === b[i]?.backend && r.host === b[i]?.host && r.owned === b[i]?.owned)
  );
}
