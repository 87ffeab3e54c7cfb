// The change proofs' thread (`run.ts`): both sources' probes for one change, away from the bench's heap.
import { parentPort } from 'node:worker_threads';
import { firstProbe, onThisClock, probeTimed } from '../compare/identity.js';
import { untilHelloRefused } from './hello.js';

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

/**
 * Ms from `start`: to the first connection from `inside` that reached the API server (`allowed`, when that
 * server saw it; `allowedHandshake`, when the client had finished its handshake), and to the first from
 * `outside` refused.
 */
export interface ProofAnswer {
  allowed: number | null;
  allowedHandshake: number | null;
  refused: number | null;
  /** After the proofs, a whole handshake from `outside` was refused too (the hello's verdict checked). */
  refusalConfirmed: boolean;
}

const PAUSE_MS = 1;

/**
 * Whole handshakes from `source`, `PAUSE_MS` apart, until one's identity line is `expected` (it names the API
 * server reached): timed when that server saw HAProxy's connection, HAProxy having let the source in by then,
 * and when the client had finished its own handshake, which comes later. Null once `deadline` has passed.
 */
async function untilLetIn(m: ProofRequest, since: number) {
  const first = await firstProbe(
    () => probeTimed(m.port, m.host, 1_000, m.inside),
    (p) => p.answer === m.expected && p.arrived !== undefined,
    since,
    m.deadline,
    () => PAUSE_MS,
  );
  return first?.arrived === undefined
    ? { allowed: null, allowedHandshake: null }
    : { allowed: first.arrived - since, allowedHandshake: first.at - since };
}

parentPort?.on('message', async (m: ProofRequest) => {
  // `start` on this thread's clock: the monotonic clock is the process's, `performance.now()` the thread's.
  const since = onThisClock(m.start);
  const [allowed, refused] = await Promise.all([
    untilLetIn(m, since),
    // A ClientHello closed with no byte back (`hello.ts`), timed at the close.
    untilHelloRefused(m.port, m.host, m.outside, since, m.deadline, PAUSE_MS),
  ]);
  // Once proven, outside any timing: a real handshake from the dropped source must be refused as well.
  const confirm = refused === null ? undefined : await probeTimed(m.port, m.host, 1_000, m.outside);
  parentPort?.postMessage({
    ...allowed,
    refused,
    refusalConfirmed: confirm?.answer === null,
  } satisfies ProofAnswer);
});
