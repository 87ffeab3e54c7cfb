import type { BackendState, FrontendState, HaproxyState, Tagger } from '../haproxy/model.js';
import { applyOperations } from './apply.js';
import type { Operation } from './operations.js';

let serials = 0;

/**
 * One read of HAProxy, interpreted by the registry (`OwnedProvider.read`), handed to the planner and back to
 * the provider's `apply`: the state, read-only, with what is known about it besides its content. Where each
 * proxy sits by name (built at the first lookup, shared by every reading derived without a proxy created or
 * deleted), and which reading and operations it was derived from, so that a pass that changes a few objects
 * of a large state pays for those objects only: a lookup instead of a scan, an index advanced by the
 * operations instead of built again (`routing-index.ts`). Pure.
 */
export class Reading {
  /** Unique in this process: what a cache of something derived from a reading keys on. */
  readonly serial = ++serials;

  private constructor(
    readonly state: HaproxyState,
    /** The reading this one is, with `operations` applied; undefined for a read. */
    readonly parent: { readonly serial: number; readonly operations: readonly Operation[] } | undefined,
    private positions: Positions | undefined,
  ) {}

  /** A reading of a state just read and interpreted. */
  static of(state: HaproxyState): Reading {
    return new Reading(state, undefined, undefined);
  }

  /** This reading with `operations` applied (`applyOperations`): what HAProxy runs once a plan is applied. */
  derive(operations: readonly Operation[], tagger: Tagger): Reading {
    const { state, keptPlaces } = applyOperations(this.state, operations, tagger, (name) =>
      this.backendPosition(name),
    );
    const parent = { serial: this.serial, operations };
    return new Reading(state, parent, keptPlaces ? this.index() : undefined);
  }

  /** The frontend named `name`, found without a scan (the first lookup indexes the state). */
  frontend(name: string): FrontendState | undefined {
    const i = this.index().frontends.get(name);
    return i === undefined ? undefined : this.state.frontends[i];
  }

  /** The backend named `name`, found without a scan. */
  backend(name: string): BackendState | undefined {
    const i = this.index().backends.get(name);
    return i === undefined ? undefined : this.state.backends[i];
  }

  /** Where `name` sits in `state.backends`, if anywhere. */
  backendPosition(name: string): number | undefined {
    return this.index().backends.get(name);
  }

  private index(): Positions {
    if (!this.positions) {
      const p: Positions = { frontends: new Map(), backends: new Map() };
      for (const [i, f] of this.state.frontends.entries()) p.frontends.set(f.name, i);
      for (const [i, b] of this.state.backends.entries()) p.backends.set(b.name, i);
      this.positions = p;
    }
    return this.positions;
  }
}

interface Positions {
  readonly frontends: Map<string, number>;
  readonly backends: Map<string, number>;
}
