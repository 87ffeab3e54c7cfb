import { ALLOW_VALUE, isAllowKey, slotOfKey } from './allow-keys.js';

/**
 * The allow map's file text (authorized networks, `edge.ts`), kept per slot so that a list change renders
 * one slot again rather than every key. At 5000 clusters × 16 networks the map holds 85 000 keys: sorting,
 * checking and joining them all took 300-600 ms per write on 2 busy cores (`bench/networks.ts`), and a list
 * change is written before it is acknowledged. Both providers write the allow map with it.
 *
 * The text: each slot in name order, its flag (`<slot> 1`) first, then its `<network>|<slot> 1` keys in
 * order; every key checked (`isAllowKey`) and every value `1`, as each write checked them before.
 *
 * Incremental only when told exactly what changed: `text(entries, { from, keys })` (or `chunks`, the same
 * text as a buffer per 64 slots) renders again only the slots of `keys` when `from` is the very entries object
 * of the last call (states are never changed in place, `model.ts`), so `entries` is `from` with those keys
 * added or deleted; anything else renders all.
 */
export class AllowFileText {
  /** Slot -> its keys, and its lines (as text, and as the bytes a file is written with). */
  private readonly slots = new Map<string, Slot>();
  /** The slots in name order; undefined once a slot comes or goes. */
  private order: Slot[] | undefined;
  /** `chunks`' buffers, a block of `BLOCK` slots of `order` each; undefined where a slot in it changed. */
  private blocks: Array<Buffer | undefined> | undefined;
  private keys = 0;
  private basis: ReadonlyMap<string, string> | undefined;
  private last: string | undefined;

  /** `refuse` makes the error a key or value that must not reach HAProxy is thrown as. */
  constructor(private readonly refuse: (detail: string) => Error) {}

  text(entries: ReadonlyMap<string, string>, since?: Since): string {
    if (entries === this.basis && this.last !== undefined) return this.last;
    this.follow(entries, since);
    this.last = this.ordered()
      .map((s) => {
        s.text ??= slotText(s.name, s.keys);
        return s.text;
      })
      .join('');
    return this.last;
  }

  /**
   * The same text as `text` gives, as buffers of `BLOCK` slots each, for a file written without joining them:
   * the allow map is 2.6 MB at 5000 clusters × 16 networks, and a list change is written before it is
   * acknowledged (joining and encoding it all took 4 ms of each list change, and left the text to collect;
   * a buffer per slot, 5000 of them, took 5 ms of `writev` per upload). A list change renders one block again.
   */
  chunks(entries: ReadonlyMap<string, string>, since?: Since): Buffer[] {
    this.follow(entries, since);
    const order = this.ordered();
    const count = Math.ceil(order.length / BLOCK);
    if (this.blocks?.length !== count) this.blocks = new Array<Buffer | undefined>(count);
    const out: Buffer[] = [];
    for (let b = 0; b < count; b++) {
      let block = this.blocks[b];
      if (!block) {
        const texts: string[] = [];
        for (const s of order.slice(b * BLOCK, (b + 1) * BLOCK)) {
          s.block = b;
          s.text ??= slotText(s.name, s.keys);
          texts.push(s.text);
        }
        block = Buffer.from(texts.join(''), 'utf8');
        this.blocks[b] = block;
      }
      out.push(block);
    }
    return out;
  }

  /** Brings the slots to `entries`: only the slots of `since.keys` when told exactly what changed. */
  private follow(entries: ReadonlyMap<string, string>, since?: Since): void {
    if (entries === this.basis) return;
    try {
      if (since && since.from === this.basis && this.basis !== undefined) {
        for (const key of since.keys) this.touch(key, entries);
        // The keys said must account for every entry; if not, all is rendered from the entries.
        if (this.keys !== entries.size) this.rebuild(entries);
      } else this.rebuild(entries);
      this.basis = entries;
      this.last = undefined;
    } catch (err) {
      this.reset();
      throw err;
    }
  }

  private ordered(): Slot[] {
    if (!this.order) {
      this.order = [...this.slots.values()].sort((a, b) => compare(a.name, b.name));
      this.blocks = undefined;
    }
    return this.order;
  }

  /** A slot's text changed: rendered again, and so is its block (if the order still holds). */
  private changed(s: Slot): void {
    s.text = undefined;
    if (s.block !== undefined && this.blocks) this.blocks[s.block] = undefined;
  }

  private touch(key: string, entries: ReadonlyMap<string, string>): void {
    const slot = slotOfKey(key);
    let s = this.slots.get(slot);
    const value = entries.get(key);
    if (value === undefined) {
      if (!s?.keys.delete(key)) return;
      this.keys--;
      this.changed(s);
      if (s.keys.size === 0) {
        this.slots.delete(slot);
        this.order = undefined;
      }
      return;
    }
    this.check(key, value);
    if (!s) {
      s = emptySlot(slot);
      this.slots.set(slot, s);
      this.order = undefined;
    }
    if (s.keys.has(key)) return;
    s.keys.add(key);
    this.changed(s);
    this.keys++;
  }

  private rebuild(entries: ReadonlyMap<string, string>): void {
    this.reset();
    for (const [key, value] of entries) {
      this.check(key, value);
      const slot = slotOfKey(key);
      let s = this.slots.get(slot);
      if (!s) {
        s = emptySlot(slot);
        this.slots.set(slot, s);
      }
      s.keys.add(key);
    }
    this.keys = entries.size;
  }

  private check(key: string, value: string): void {
    if (!isAllowKey(key) || value !== ALLOW_VALUE)
      throw this.refuse(`refusing to write allow-map entry ${JSON.stringify(`${key} ${value}`)} to HAProxy`);
  }

  private reset(): void {
    this.slots.clear();
    this.order = undefined;
    this.blocks = undefined;
    this.keys = 0;
    this.basis = undefined;
    this.last = undefined;
  }
}

/** What changed since the entries rendered last: `from`, those entries, and the keys added or deleted. */
interface Since {
  from: ReadonlyMap<string, string>;
  keys: Iterable<string>;
}

interface Slot {
  name: string;
  keys: Set<string>;
  text: string | undefined;
  /** Its block in `chunks`' buffers, as last handed out. */
  block: number | undefined;
}

/** Slots per buffer of `chunks`: about 40 kB at 16 networks each, 79 buffers for 5000 slots. */
const BLOCK = 64;

const emptySlot = (name: string): Slot => ({ name, keys: new Set(), text: undefined, block: undefined });

function slotText(slot: string, keys: ReadonlySet<string>): string {
  const networks = [...keys].filter((k) => k !== slot).sort(compare);
  const lines = keys.has(slot) ? [slot, ...networks] : networks;
  return lines.map((k) => `${k} ${ALLOW_VALUE}\n`).join('');
}

function compare(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}
