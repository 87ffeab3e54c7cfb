import { ConcurrentChangeError, FencedError, NotOwnedError } from '../model/errors.js';
import type { Operation, Plan } from '../plan/plan.js';
import { Reading } from '../plan/reading.js';
import type { ApplyReport, CloseOptions, Provider, ProviderInfo } from '../providers/provider.js';
import type { Registry } from './registry.js';

/** How fresh a read must be. */
export interface ReadOptions {
  /**
   * Read everything HAProxy runs, so that drift made by hand at runtime is seen: start, resyncs and tries
   * after a failure ask for it. Without it the last reading is answered while the provider's revision says
   * nothing but this service changed HAProxy since.
   */
  fresh?: boolean;
  /**
   * `false`: only look (`GET /v1/plan`, the CLI's `plan`): the provider is not asked to bring its files in
   * line with what runs (`Provider.settle`), and the reading is not kept for the next pass.
   */
  settle?: boolean;
}

/**
 * Ownership as a layer around any provider, for reads and writes alike (external-dns's `TXTRegistry`): every
 * read is interpreted here, once, and the loop only ever sees `Reading`s, never a raw tag; every plan is
 * checked against the reading it was made from, and one that would change, delete or shadow an object this
 * owner does not hold never reaches the provider. The last reading is kept, moved on by each plan the
 * provider reports applied (`Reading.derive`), and answered again while the provider's revision stays: a
 * pass after a change costs one revision request, not a read of every slot.
 */
export class OwnedProvider {
  readonly name: string;
  private kept: { reading: Reading; revision: string } | undefined;
  /** The revision each of the last readings handed out is current at, by serial (a few are enough). */
  private readonly revisions = new Map<number, string>();

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

  /** What HAProxy has, interpreted: the reading kept, while nothing but this service changed HAProxy. */
  async read(signal: AbortSignal, options: ReadOptions = {}): Promise<Reading> {
    const kept = this.kept;
    if (!options.fresh && kept && (await this.inner.revision(signal)) === kept.revision) return kept.reading;
    this.kept = undefined;
    const { raw, revision } = await this.inner.read(signal);
    const reading = Reading.of(this.registry.interpret(raw));
    if (options.settle === false) return reading;
    this.keep(reading, revision);
    await this.inner.settle?.(reading, signal);
    return reading;
  }

  /**
   * The reading kept, without asking the provider's revision: for a pass whose plan goes to `apply`, which
   * compares the revision right before it writes, so that a change costs one look at it rather than two (a
   * request to the Data Plane API, `show proc` and the owned file's stat on stock). A plan with nothing to
   * apply confirms the reading with `isCurrent` instead. Undefined when none is kept.
   */
  keptReading(): Reading | undefined {
    return this.kept?.reading;
  }

  /** Whether HAProxy still runs `reading`: the provider's revision is the one it was kept at. */
  async isCurrent(reading: Reading, signal: AbortSignal): Promise<boolean> {
    const revision = this.revisions.get(reading.serial);
    return revision !== undefined && (await this.inner.revision(signal)) === revision;
  }

  /** Refused connections per slot (`Provider.refusals`); empty where the provider cannot say. */
  async refusals(table: string, signal: AbortSignal): Promise<Map<string, number>> {
    return (await this.inner.refusals?.(table, signal)) ?? new Map();
  }

  /** The provider's revision token (`Provider.revision`). */
  revision(signal: AbortSignal): Promise<string> {
    return this.inner.revision(signal);
  }

  /** Whether `revision` is one this service left HAProxy at (its own apply), not someone else's change. */
  isOwnRevision(revision: string): boolean {
    return this.kept?.revision === revision;
  }

  async apply(plan: Plan, from: Reading, signal: AbortSignal): Promise<ApplyReport> {
    const fenced = this.fence?.();
    if (fenced !== undefined) throw new FencedError(fenced);
    refuseForeign(plan.operations, from, this.registry);
    const revision = this.revisions.get(from.serial);
    if (revision === undefined)
      throw new ConcurrentChangeError('the plan was made from a reading this provider no longer tracks');
    const to = from.derive(plan.operations, this.registry);
    this.kept = undefined;
    const report = await this.inner.apply(plan, { from, to, revision }, signal);
    if (report.revision !== undefined) this.keep(to, report.revision);
    return report;
  }

  private keep(reading: Reading, revision: string): void {
    this.kept = { reading, revision };
    this.revisions.set(reading.serial, revision);
    for (const serial of this.revisions.keys()) {
      if (this.revisions.size <= 8) break;
      this.revisions.delete(serial);
    }
  }

  ping(signal: AbortSignal): Promise<ProviderInfo> {
    return this.inner.ping(signal);
  }

  async close(options?: CloseOptions): Promise<void> {
    await this.inner.close?.(options);
  }
}

/**
 * Throws `NotOwnedError` when an operation names an object of `current` that the registry found foreign: an
 * update or deletion of a foreign frontend, backend or server, a server added to a foreign backend, a
 * creation under a name a foreign proxy holds, or a rule list for a foreign frontend. Objects missing from
 * `current` are left to the provider (a concurrent change, not an ownership question).
 */
export function refuseForeign(operations: readonly Operation[], current: Reading, registry: Registry): void {
  // Maps an owned frontend routes by, now or once this plan has made or changed it (frontends are few).
  const maps = new Set<string>();
  for (const f of current.state.frontends) {
    if (!f.owned) continue;
    if (f.sniMap) maps.add(f.sniMap);
    if (f.edge) maps.add(f.edge.allowMap);
  }
  for (const op of operations)
    if (op.kind === 'create_frontend' || op.kind === 'update_frontend') {
      maps.add(op.frontend.sniMap);
      maps.add(op.frontend.edge.allowMap);
    }
  const refuse = (what: string) => {
    throw new NotOwnedError(`refusing to change ${what}: it is not owned by ${registry.id}`);
  };
  // Frontends and backends share one namespace: a name is checked against both.
  const proxy = (name: string) => {
    if (current.frontend(name)?.owned === false) refuse(`frontend ${name}`);
    if (current.backend(name)?.owned === false) refuse(`backend ${name}`);
  };
  const server = (backend: string, name: string) => {
    const s = current.backend(backend)?.servers.find((x) => x.name === name);
    if (s && !s.owned) refuse(`server ${backend}/${name}`);
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
      case 'add_allow_entry':
      case 'delete_allow_entry':
        // An entry of our map is ours whatever backend someone made it name.
        if (!maps.has(op.map)) refuse(`map ${op.map}`);
        break;
    }
  }
}
