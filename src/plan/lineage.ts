import type { RawBackend, RawFrontend, RawState } from '../haproxy/model.js';
import type { Operation } from './operations.js';

/**
 * What is known about a raw state besides its content, kept beside it (states are never changed in place):
 * where each proxy sits by name, and which state and operations it was made from. Both let a pass that
 * changes a few objects of a large state pay for those objects only: a lookup instead of a scan, and an
 * index advanced by the operations instead of rebuilt. Pure.
 */

interface Positions {
  frontends: Map<string, number>;
  backends: Map<string, number>;
}

// Shared by every state whose lists hold the same names at the same places (applyOperations without a
// creation or deletion of a proxy): built once per such run of states.
const positions = new WeakMap<RawState, Positions>();

function positionsOf(state: RawState): Positions {
  let p = positions.get(state);
  if (!p) {
    p = { frontends: new Map(), backends: new Map() };
    for (const [i, f] of state.frontends.entries()) p.frontends.set(f.name, i);
    for (const [i, b] of state.backends.entries()) p.backends.set(b.name, i);
    positions.set(state, p);
  }
  return p;
}

/** The frontend named `name` in `state`, found without a scan (the first lookup indexes the state). */
export function frontendNamed(state: RawState, name: string): RawFrontend | undefined {
  const i = positionsOf(state).frontends.get(name);
  const f = i === undefined ? undefined : state.frontends[i];
  return f?.name === name ? f : undefined;
}

/** The backend named `name` in `state`, found without a scan. */
export function backendNamed(state: RawState, name: string): RawBackend | undefined {
  const i = positionsOf(state).backends.get(name);
  const b = i === undefined ? undefined : state.backends[i];
  return b?.name === name ? b : undefined;
}

/** Where `name` sits in `state.backends`, if anywhere. */
export function backendPosition(state: RawState, name: string): number | undefined {
  return positionsOf(state).backends.get(name);
}

/** `to` holds the same proxy names at the same places as `from`: it shares `from`'s positions. */
export function samePlaces(from: RawState, to: RawState): void {
  positions.set(to, positionsOf(from));
}

// A number per state, so that a derived state can name its parent without keeping it alive.
const serials = new WeakMap<RawState, number>();
let nextSerial = 1;

export function serialOf(state: RawState): number {
  let n = serials.get(state);
  if (n === undefined) {
    n = nextSerial++;
    serials.set(state, n);
  }
  return n;
}

export interface Derivation {
  /** `serialOf` the state the operations were applied to. */
  parent: number;
  operations: readonly Operation[];
}

const derivations = new WeakMap<RawState, Derivation>();

/** Records that `state` is `parent` with `operations` applied (`applyOperations` does, for every result). */
export function derived(state: RawState, parent: RawState, operations: readonly Operation[]): void {
  derivations.set(state, { parent: serialOf(parent), operations });
}

export function derivationOf(state: RawState): Derivation | undefined {
  return derivations.get(state);
}
