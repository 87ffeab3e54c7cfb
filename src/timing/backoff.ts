/**
 * Exponential backoff, the one rule for everything that tries again by itself (the loop after a failed
 * pass, a Kubernetes watch that broke, an HAProxy instance whose lane could not be made): the first wait is
 * `minMs`, each failure in a row doubles it, up to `maxMs`; a success starts again from `minMs`.
 */
export class Backoff {
  private failures = 0;

  constructor(
    readonly minMs: number,
    readonly maxMs: number,
  ) {}

  /** The wait before the next try, counting one more failure. */
  next(): number {
    const ms = this.peek();
    this.failures++;
    return ms;
  }

  /** The wait the next failure gets, without counting it. */
  peek(): number {
    return Math.min(this.maxMs, this.minMs * 2 ** Math.min(this.failures, 30));
  }

  reset(): void {
    this.failures = 0;
  }
}
