import type { RawState } from '../haproxy/model.js';
import { FencedError, NotOwnedError } from '../model/errors.js';
import { backendNamed, frontendNamed } from '../plan/lineage.js';
import type { Operation, Plan } from '../plan/plan.js';
import type {
  ApplyReport,
  CloseOptions,
  Provider,
  ProviderInfo,
  ReadOptions,
} from '../providers/provider.js';
import type { Registry } from './registry.js';

/**
 * Ownership as a layer around any provider (external-dns's `TXTRegistry` filters a plan before
 * `provider.ApplyChanges`): every plan is checked against the state it was made from, and one that would
 * change, delete or shadow an object this owner does not hold never reaches the provider, which then only
 * does I/O. Reads pass through untouched; the registry interprets them.
 */
export class OwnedProvider implements Provider {
  readonly name: string;

  /**
   * `fence`, when given, is asked right before each apply: a reason not to write (this replica does not lead)
   * refuses the plan with `FencedError`, so that two replicas never apply at once.
   */
  constructor(
    private readonly inner: Provider,
    readonly registry: Registry,
    private readonly fence?: () => string | undefined,
  ) {
    this.name = inner.name;
  }

  readState(signal: AbortSignal, options?: ReadOptions): Promise<RawState> {
    return this.inner.readState(signal, options);
  }

  /** The inner provider's revision; one that has none never changes (`''`). */
  revision(signal: AbortSignal): Promise<string> {
    return this.inner.revision ? this.inner.revision(signal) : Promise.resolve('');
  }

  async apply(plan: Plan, current: RawState, signal: AbortSignal): Promise<ApplyReport> {
    const fenced = this.fence?.();
    if (fenced !== undefined) throw new FencedError(fenced);
    refuseForeign(plan.operations, current, this.registry);
    return this.inner.apply(plan, current, signal);
  }

  ping(signal: AbortSignal): Promise<ProviderInfo> {
    return this.inner.ping(signal);
  }

  async close(options?: CloseOptions): Promise<void> {
    await this.inner.close?.(options);
  }
}

/**
 * Throws `NotOwnedError` when an operation names an object in `current` that `registry` does not own: an
 * update or deletion of a foreign frontend, backend or server, a server added to a foreign backend, a
 * creation under a name a foreign proxy holds, or an owned rule list for a foreign frontend. Objects missing
 * from `current` are left to the provider (a concurrent change, not an ownership question).
 */
export function refuseForeign(operations: readonly Operation[], current: RawState, registry: Registry): void {
  // One lookup per object an operation names (`lineage.ts` indexes the state once): a plan of a few
  // operations on a state of thousands of backends costs those few.
  const backend = (name: string) => backendNamed(current, name);
  // Maps an owned frontend routes by, now or once this plan has made or changed it (frontends are few).
  const maps = new Set<string>();
  for (const f of current.frontends) if (f.sniMap && registry.owns(f.tags)) maps.add(f.sniMap);
  for (const op of operations)
    if ((op.kind === 'create_frontend' || op.kind === 'update_frontend') && op.frontend.sniMap)
      maps.add(op.frontend.sniMap);
  const refuse = (what: string) => {
    throw new NotOwnedError(`refusing to change ${what}: it is not owned by ${registry.id}`);
  };
  // Frontends and backends share one namespace: a name is checked against both.
  const proxy = (name: string) => {
    const f = frontendNamed(current, name);
    if (f && !registry.owns(f.tags)) refuse(`frontend ${name}`);
    const b = backend(name);
    if (b && !registry.owns(b.tags)) refuse(`backend ${name}`);
  };
  const server = (backendName: string, name: string) => {
    const s = backend(backendName)?.servers.find((x) => x.name === name);
    if (s && !registry.owns(s.tags)) refuse(`server ${backendName}/${name}`);
  };
  for (const op of operations) {
    switch (op.kind) {
      case 'create_frontend':
      case 'update_frontend':
        proxy(op.frontend.name);
        break;
      case 'create_backend':
      case 'update_backend':
        proxy(op.backend.name);
        break;
      case 'delete_frontend':
      case 'delete_backend':
        proxy(op.name);
        break;
      case 'create_server':
        proxy(op.backend);
        break;
      case 'update_server':
      case 'delete_server':
        proxy(op.backend);
        server(op.backend, op.server.name);
        break;
      case 'set_switching_rules':
        proxy(op.frontend);
        break;
      case 'set_map_entry':
        if (!maps.has(op.map)) refuse(`map ${op.map}`);
        proxy(op.backend);
        break;
      case 'delete_map_entry':
        // An entry of our map is ours whatever backend someone made it name.
        if (!maps.has(op.map)) refuse(`map ${op.map}`);
        break;
    }
  }
}
