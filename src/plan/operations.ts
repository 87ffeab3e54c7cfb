import type { DesiredFrontend, ServerSpec, SwitchingRule } from '../haproxy/model.js';

/** The planner's vocabulary: what a plan may ask a provider to do, and what it reports beside. */
export interface FieldChange {
  readonly field: string;
  readonly from: string;
  readonly to: string;
}

export interface BackendSettings {
  readonly name: string;
  readonly balance: string;
  /** A table-only backend's `stick-table` arguments (the refusals table). */
  readonly table?: string;
  /** A slot's guard: its own allow map (`RawBackend.allowMap`). */
  readonly allowMap?: string;
}

/**
 * When an allow-map change runs within a plan (`allow.ts`), so that no client both lists allow is ever
 * refused and no restricted cluster is ever open to all: `open` (a routed slot's flag removed: it becomes
 * open) first, then `entry` (new network keys), `flag` (a slot becomes restricted), the SNI map's changes,
 * and `after` (keys and flags no longer wanted, once no host routes by them).
 */
export type AllowStage = 'open' | 'entry' | 'flag' | 'after';

export type Operation =
  | { kind: 'create_frontend'; frontend: DesiredFrontend }
  | { kind: 'update_frontend'; frontend: DesiredFrontend; changes: FieldChange[] }
  | { kind: 'delete_frontend'; name: string }
  | { kind: 'create_backend'; backend: BackendSettings }
  /** A slot backend's guard written (the upgrade to per-slot allow maps): its servers are kept. */
  | { kind: 'update_backend'; backend: BackendSettings; changes: FieldChange[] }
  | { kind: 'delete_backend'; name: string }
  | { kind: 'create_server'; backend: string; server: ServerSpec }
  | { kind: 'update_server'; backend: string; server: ServerSpec; changes: FieldChange[] }
  | { kind: 'delete_server'; backend: string; server: ServerSpec }
  /** Map routing: `host` now routes to `backend` (`previous`: the backend it routed to, if any). */
  | {
      kind: 'set_map_entry';
      map: string;
      host: string;
      backend: string;
      previous: string | null;
      cluster: string;
    }
  | { kind: 'delete_map_entry'; map: string; host: string; backend: string }
  /** Authorized networks: a key of the allow map (a slot's flag, or `<network>|<slot>`), added or removed. */
  | { kind: 'add_allow_entry'; map: string; key: string; stage: AllowStage }
  | { kind: 'delete_allow_entry'; map: string; key: string; stage: AllowStage }
  | {
      kind: 'set_switching_rules';
      frontend: string;
      rules: SwitchingRule[];
      added: SwitchingRule[];
      removed: SwitchingRule[];
    };

/** An operation on an allow map (authorized networks): what a list change is made of. */
export type AllowOperation = Extract<Operation, { kind: 'add_allow_entry' | 'delete_allow_entry' }>;

export function isAllowOperation<T extends { kind: string }>(op: T): op is Extract<T, AllowOperation> {
  return op.kind === 'add_allow_entry' || op.kind === 'delete_allow_entry';
}

export type ConflictKind = 'frontend_not_owned' | 'default_backend_missing';

/** Something the desired state asks for that would mean touching an object the service does not own. */
export interface Conflict {
  kind: ConflictKind;
  name: string;
  detail: string;
}

export interface Plan {
  readonly operations: readonly Operation[];
  readonly conflicts: readonly Conflict[];
  /** Map routing: the slot pool and which slot serves which host once the plan is applied. */
  pool?: PoolReport;
}

export interface PlanOptions {
  /**
   * `ahead` (the default): grow the slot pool once it is nearly held. `when_needed`: only when a route finds
   * no free slot, so that a pass serving a webhook never waits for a reload while a slot is free.
   */
  grow?: 'ahead' | 'when_needed';
}

export interface PoolReport {
  map: string;
  /** Slots after the plan. */
  size: number;
  /** Slots no route holds after the plan. */
  free: number;
  /** The pool would grow now if this plan were allowed to (left to a later pass). */
  growthDeferred: boolean;
  /** Slots this plan creates. */
  created: number;
  /** Every placed route after the plan: host -> slot backend. */
  assignments: Map<string, string>;
}
