/** Marks a key of the base deleted in the overlay. */
const GONE: unique symbol = Symbol('gone');

/**
 * A map made from another by a few changes, without copying it: a base shared with the map it came from
 * (never changed), and the changes since in a small overlay of its own. Reads answer as a plain `Map` with
 * the same operations applied would, iteration order included (insertion order: a changed value keeps its
 * place, a key deleted and set again goes last). An SNI map of thousands of entries is changed by one entry
 * per cluster change (`applyOperations`): `edit` costs the overlay, not the map.
 *
 * The overlay is copied by each `edit` and folded into a new base once it outgrows about sqrt(2·base): a
 * change then costs O(sqrt N) on average (half the overlay copied, plus the rebuild of N entries spread over
 * the sqrt(2N) changes before it), where a copy of the map costs O(N).
 *
 * Only the caller of `edit` changes the map it returns, and only until it hands it out (as
 * `applyOperations` does with what it copies): afterwards it is read only, like any object of a state.
 * `structuredClone` does not keep the class (a plain object comes back): clone a state with
 * `cloneRawState` (`model.ts`).
 */
export class CowMap<K, V> implements ReadonlyMap<K, V> {
  private constructor(
    private readonly base: ReadonlyMap<K, V>,
    /** Values changed or set since the base, and base keys deleted (`GONE`). */
    private readonly overlay: Map<K, V | typeof GONE>,
    /** Base keys deleted and set again since: listed after the base, in the overlay's order. */
    private readonly moved: Set<K>,
    private count: number,
  ) {}

  /** A map to change that starts as `from` (which stays as it is): its base shared, its overlay copied. */
  static edit<K, V>(from: ReadonlyMap<K, V> = new Map()): CowMap<K, V> {
    if (!(from instanceof CowMap)) return new CowMap(from, new Map(), new Set(), from.size);
    const m = from as CowMap<K, V>;
    if (m.overlay.size > overlayLimit(m.base.size))
      return new CowMap(new Map(m), new Map(), new Set(), m.size);
    return new CowMap(m.base, new Map(m.overlay), new Set(m.moved), m.count);
  }

  /**
   * The map as its edits leave it: folded into a new base now when the overlay outgrew the base (a bulk
   * change, such as lists put on every cluster at once), so that the change that made the overlay pays for
   * the fold, not the next edit (which would otherwise copy all of it, and share no base to diff against).
   */
  settled(): CowMap<K, V> {
    if (this.overlay.size <= overlayLimit(this.base.size)) return this;
    return new CowMap(new Map(this), new Map(), new Set(), this.count);
  }

  /**
   * The keys whose values may differ between `from` and `to` when `to` was made from `from` by `edit`s
   * sharing its base (the two overlays' keys): a diff of a few keys, not of the map. Undefined when they
   * share nothing (compare all).
   */
  static changedKeys<K, V>(from: ReadonlyMap<K, V>, to: ReadonlyMap<K, V>): Set<K> | undefined {
    if (!(to instanceof CowMap)) return undefined;
    const t = to as CowMap<K, V>;
    if (t.base === from) return new Set(t.overlay.keys());
    if (!(from instanceof CowMap) || (from as CowMap<K, V>).base !== t.base) return undefined;
    return new Set([...(from as CowMap<K, V>).overlay.keys(), ...t.overlay.keys()]);
  }

  get size(): number {
    return this.count;
  }

  get(key: K): V | undefined {
    if (!this.overlay.has(key)) return this.base.get(key);
    const v = this.overlay.get(key) as V | typeof GONE;
    return v === GONE ? undefined : v;
  }

  has(key: K): boolean {
    return this.overlay.has(key) ? this.overlay.get(key) !== GONE : this.base.has(key);
  }

  set(key: K, value: V): this {
    const inBase = this.base.has(key);
    if (!this.has(key)) {
      this.count++;
      // Absent, as a plain Map would: it goes last. A base key can only be absent through the overlay.
      this.overlay.delete(key);
      if (inBase) this.moved.add(key);
    }
    this.overlay.set(key, value);
    return this;
  }

  delete(key: K): boolean {
    if (!this.has(key)) return false;
    this.count--;
    if (this.base.has(key)) this.overlay.set(key, GONE);
    else this.overlay.delete(key);
    return true;
  }

  *entries(): MapIterator<[K, V]> {
    for (const [key, value] of this.base) {
      if (this.moved.has(key)) continue;
      if (!this.overlay.has(key)) yield [key, value];
      else {
        const v = this.overlay.get(key) as V | typeof GONE;
        if (v !== GONE) yield [key, v];
      }
    }
    for (const [key, v] of this.overlay) {
      if (v === GONE || (this.base.has(key) && !this.moved.has(key))) continue;
      yield [key, v];
    }
  }

  *keys(): MapIterator<K> {
    for (const [key] of this.entries()) yield key;
  }

  *values(): MapIterator<V> {
    for (const [, value] of this.entries()) yield value;
  }

  [Symbol.iterator](): MapIterator<[K, V]> {
    return this.entries();
  }

  forEach(fn: (value: V, key: K, map: ReadonlyMap<K, V>) => void, thisArg?: unknown): void {
    for (const [key, value] of this.entries()) fn.call(thisArg, value, key, this);
  }
}

/** Overlays past this many changes are folded into a new base (see the class comment). */
function overlayLimit(baseSize: number): number {
  return Math.max(32, Math.ceil(Math.sqrt(2 * baseSize)));
}
