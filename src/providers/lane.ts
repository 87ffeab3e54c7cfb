/**
 * Jobs that must not overlap (writers of the same files, applies), run one after another in the order they
 * were given: each starts once the one before has settled, whether it worked or failed.
 */
export class Lane {
  private tail: Promise<unknown> = Promise.resolve();

  run<T>(job: () => Promise<T>): Promise<T> {
    const run = this.tail.then(job, job);
    this.tail = run.catch(() => {});
    return run;
  }

  /** Resolves once every job given so far has settled. */
  async idle(): Promise<void> {
    await this.tail;
  }
}
