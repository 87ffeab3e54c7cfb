/**
 * Probes every host again and again, each round all hosts at once, until stopped: what proves that routes
 * kept answering through a change (an upgrade, a reload). Every probe is one real connection; a probe
 * answers `undefined` when the host was served as it should be, else why not.
 */
export interface ProbeFailure {
  host: string;
  /** Milliseconds since the prober started. */
  at: number;
  why: string;
}

export interface SniProber {
  /** Probes answered so far, and those that failed. */
  readonly probes: number;
  readonly rounds: number;
  readonly failures: readonly ProbeFailure[];
  /** Resolves once `n` more rounds have finished (rejects if the prober stops first). */
  roundsFromNow(n: number): Promise<void>;
  /** Ends the loop after the round under way; resolves with the totals. */
  stop(): Promise<{ probes: number; rounds: number; failures: ProbeFailure[]; ms: number }>;
}

export function startSniProber(
  hosts: readonly string[],
  probe: (host: string) => Promise<string | undefined>,
  /** A bound on the loop, whatever happens to the test: it stops by itself after this long. */
  maxMs = 300_000,
): SniProber {
  const started = Date.now();
  const failures: ProbeFailure[] = [];
  let probes = 0;
  let rounds = 0;
  let stopping = false;
  let ended = false;
  const waiters: Array<{ round: number; resolve: () => void; reject: (e: Error) => void }> = [];
  const loop = (async () => {
    while (!stopping && Date.now() - started < maxMs) {
      await Promise.all(
        hosts.map(async (host) => {
          const why = await probe(host).catch((err: unknown) => String(err));
          probes++;
          if (why !== undefined) failures.push({ host, at: Date.now() - started, why });
        }),
      );
      rounds++;
      for (const w of waiters.filter((x) => x.round <= rounds)) {
        waiters.splice(waiters.indexOf(w), 1);
        w.resolve();
      }
    }
    ended = true;
    for (const w of waiters.splice(0)) w.reject(new Error(`the prober stopped after ${rounds} rounds`));
  })();
  return {
    get probes() {
      return probes;
    },
    get rounds() {
      return rounds;
    },
    failures,
    roundsFromNow: (n) =>
      new Promise<void>((resolve, reject) => {
        if (ended) reject(new Error(`the prober stopped after ${rounds} rounds`));
        else waiters.push({ round: rounds + n, resolve, reject });
      }),
    async stop() {
      stopping = true;
      await loop;
      return { probes, rounds, failures: [...failures], ms: Date.now() - started };
    },
  };
}
