import type { ClusterRecord } from '../model/cluster.js';
import { compareStrings } from '../routes/route.js';
import type { JournalEntry } from './journal.js';

/** A batch's changes over the current clusters, kept apart until the batch is durable. */
export class Draft {
  private readonly changes = new Map<string, ClusterRecord | null>();
  constructor(private readonly base: ReadonlyMap<string, ClusterRecord>) {}

  get(name: string): ClusterRecord | undefined {
    const changed = this.changes.get(name);
    return changed === undefined ? this.base.get(name) : (changed ?? undefined);
  }

  set(name: string, record: ClusterRecord): void {
    this.changes.set(name, record);
  }

  delete(name: string): boolean {
    const had = this.get(name) !== undefined;
    if (had) this.changes.set(name, null);
    return had;
  }

  names(): string[] {
    const names = [...this.base.keys()].filter((n) => this.changes.get(n) !== null);
    for (const [n, r] of this.changes) if (r !== null && !this.base.has(n)) names.push(n);
    return names;
  }

  /** The journal lines for this draft, numbered after `seq`. */
  entries(base: ReadonlyMap<string, ClusterRecord>, seq: number): JournalEntry[] {
    const out: JournalEntry[] = [];
    for (const [name, r] of this.changes) {
      if (r !== null) out.push({ seq: seq + out.length + 1, put: r });
      else if (base.has(name)) out.push({ seq: seq + out.length + 1, delete: name });
    }
    return out;
  }

  apply(clusters: Map<string, ClusterRecord>): Map<string, ClusterRecord> {
    for (const [name, r] of this.changes) {
      if (r === null) clusters.delete(name);
      else clusters.set(name, r);
    }
    return clusters;
  }

  /** The sorted list with this draft's changes, patched in place when they are few. */
  patchSorted(sorted: ClusterRecord[] | undefined): ClusterRecord[] | undefined {
    if (sorted === undefined || this.changes.size > 64) return undefined;
    for (const [name, r] of this.changes) {
      const i = lowerBound(sorted, name);
      const found = sorted[i]?.name === name;
      if (r === null) {
        if (found) sorted.splice(i, 1);
      } else sorted.splice(i, found ? 1 : 0, r);
    }
    return sorted;
  }
}

function lowerBound(sorted: readonly ClusterRecord[], name: string): number {
  let lo = 0;
  let hi = sorted.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (compareStrings((sorted[mid] as ClusterRecord).name, name) < 0) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}
