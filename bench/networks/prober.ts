// The change proofs' thread (`run.ts`): both sources' handshakes for one change, away from the bench's heap.
import { parentPort } from 'node:worker_threads';
import { probeUntil } from '../compare/identity.js';

/** One change's proofs; `start` is `process.hrtime.bigint()` in the bench's thread when the change is sent. */
export interface ProofRequest {
  port: number;
  host: string;
  expected: string;
  inside: string;
  outside: string;
  start: bigint;
  /** Epoch ms. */
  deadline: number;
}

/** Ms from `start` to the first handshake from `inside` that reaches the API server, and from `outside` refused. */
export interface ProofAnswer {
  allowed: number | null;
  refused: number | null;
}

/** Handshakes from one source, 1 ms apart: a proof is timed to a handshake, not to a poll interval. */
const tight = (source: string) => ({ from: () => source, pauseMs: () => 1 });

parentPort?.on('message', async (m: ProofRequest) => {
  // `start` on this thread's clock: the monotonic clock is the process's, `performance.now()` the thread's.
  const since = performance.now() - Number(process.hrtime.bigint() - m.start) / 1e6;
  const [allowed, refused] = await Promise.all([
    probeUntil(m.port, m.host, (answer) => answer === m.expected, since, m.deadline, tight(m.inside)),
    // Waiting for a refusal, a connection let in needs no identity line: it is closed once its handshake is.
    probeUntil(m.port, m.host, (answer) => answer === null, since, m.deadline, {
      ...tight(m.outside),
      handshakeOnly: true,
    }),
  ]);
  parentPort?.postMessage({ allowed, refused } satisfies ProofAnswer);
});
