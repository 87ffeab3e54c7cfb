import type { Socket } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { connect, createSecureContext, createServer, type Server, type TLSSocket } from 'node:tls';
import { testKeyPair } from '../../test/support/tls.js';
import { tsWorker } from './thread.js';

/**
 * The stand-in vCluster API servers: a few TLS servers on each node address (127.0.0.2, 127.0.0.3), all at
 * the same ports, that answer every connection with `<address>:<port> <SNI>` and, on a second line, when the
 * connection from HAProxy arrived (`process.hrtime.bigint()`, ns: the process's monotonic clock, which the
 * probing threads share), and keep it open until the client closes. Many routes share one server; the SNI in
 * the answer proves which route HAProxy took, the address and port which server (before and after a node
 * address change).
 */
export interface IdentityServers {
  addresses: string[];
  ports: number[];
  close(): Promise<void>;
}

/**
 * The servers run in a worker thread of their own: in the bench's thread, every handshake they answered left
 * native memory that made V8 collect the bench's whole heap (70 MB) every 200-300 ms, and each such pause
 * (5-35 ms) was counted into whichever change it fell in (`bench/networks.ts`).
 */
export async function startIdentityServers(addresses: string[], count: number): Promise<IdentityServers> {
  const worker = tsWorker(new URL('./identity-worker.ts', import.meta.url), {
    workerData: { addresses, count },
  });
  const ports = await new Promise<number[]>((resolve, reject) => {
    worker.once('message', (m: { ports?: number[]; error?: string }) =>
      m.ports ? resolve(m.ports) : reject(new Error(m.error ?? 'the identity servers did not start')),
    );
    worker.once('error', reject);
    worker.once('exit', (code) => reject(new Error(`the identity servers' thread exited (${code})`)));
  });
  return { addresses, ports, close: () => worker.terminate().then(() => {}) };
}

/** The servers themselves (in `identity-worker.ts`): `count` ports free on every address. */
export async function listenIdentityServers(addresses: string[], count: number): Promise<number[]> {
  const servers: Server[] = [];
  const ports: number[] = [];
  for (let attempt = 0; ports.length < count && attempt < count * 20; attempt++) {
    const port = 20_000 + Math.floor(Math.random() * 9_000);
    if (ports.includes(port)) continue;
    const started: Server[] = [];
    try {
      for (const address of addresses) started.push(await listen(address, port));
      servers.push(...started);
      ports.push(port);
    } catch {
      await Promise.all(started.map(closeServer));
    }
  }
  if (ports.length < count) {
    await Promise.all(servers.map(closeServer));
    throw new Error(`found only ${ports.length} ports free on ${addresses}`);
  }
  return ports;
}

function listen(address: string, port: number): Promise<Server> {
  // When HAProxy's connection arrived, by its address and port: the moment HAProxy had let a client through.
  const arrivals = new Map<string, bigint>();
  const peer = (s: Socket) => `${s.remoteAddress}:${s.remotePort}`;
  const server = createServer(testKeyPair(), (socket: TLSSocket) => {
    socket.on('error', () => {});
    const arrived = arrivals.get(peer(socket));
    socket.write(`${address}:${port} ${socket.servername || '-'}\n${arrived ?? ''}\n`);
  });
  server.on('connection', (raw: Socket) => {
    const key = peer(raw);
    arrivals.set(key, process.hrtime.bigint());
    raw.once('close', () => arrivals.delete(key));
  });
  server.on('tlsClientError', () => {});
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, address, () => resolve(server));
  });
}

function closeServer(server: Server): Promise<void> {
  return new Promise((resolve) => server.close(() => resolve()));
}

/**
 * Where probes come from: the system's choice (127.0.0.1) unless given. `sources(200)` spreads them over
 * 127.0.1.1-127.0.1.200 in turn, so that HAProxy's per-source limits (1000 connections per 10 s by default)
 * judge many clients, not one bench that probes every 15 ms.
 */
export type ProbeSource = () => string | undefined;
export const systemSource: ProbeSource = () => undefined;
export function sources(count: number, prefix = '127.0.1.'): ProbeSource {
  let i = 0;
  return () => `${prefix}${1 + (i++ % Math.min(count, 254))}`;
}

/**
 * One client context for every probe: `connect` without one builds a context per handshake, a third of a
 * refused probe's time and a tenth of a full one's on this machine (`bench/networks.ts`, where the proofs'
 * own CPU competes with the service for two cores).
 */
let probeContext: ReturnType<typeof createSecureContext> | undefined;
const clientContext = () => {
  probeContext ??= createSecureContext({});
  return probeContext;
};

/** One TLS handshake to HAProxy with `host` as SNI: the identity line that came back, or null. */
export async function probe(
  port: number,
  host: string,
  timeoutMs = 2_000,
  localAddress?: string,
): Promise<string | null> {
  return (await probeTimed(port, host, timeoutMs, localAddress)).answer;
}

/**
 * `probe`, with when its outcome was known (`performance.now()`): for an answer, when the client finished
 * its handshake with the server that then sent it (the server's whole first flight had arrived, so HAProxy
 * had let the connection through; the line, a round trip later, says which server it was); for a refusal,
 * when the connection was closed. `arrived`: when the server saw HAProxy's connection (its second line).
 */
export function probeTimed(
  port: number,
  host: string,
  timeoutMs = 2_000,
  localAddress?: string,
): Promise<{ answer: string | null; at: number; arrived?: number }> {
  return new Promise((resolve) => {
    let data = '';
    let settled = false;
    let handshaken: number | undefined;
    const socket = connect({
      host: '127.0.0.1',
      port,
      servername: host,
      rejectUnauthorized: false,
      secureContext: clientContext(),
      ...(localAddress ? { localAddress } : {}),
    });
    const done = (answer: string | null, stamp?: string) => {
      if (settled) return;
      settled = true;
      const now = performance.now();
      clearTimeout(timer);
      socket.destroy();
      const at = answer !== null && handshaken !== undefined ? handshaken : now;
      resolve(stamp ? { answer, at, arrived: onThisClock(BigInt(stamp), now) } : { answer, at });
    };
    const timer = setTimeout(() => done(null), timeoutMs);
    socket.setEncoding('utf8');
    socket.once('secureConnect', () => {
      handshaken = performance.now();
    });
    socket.on('data', (chunk: string) => {
      data += chunk;
      const [line, stamp, rest] = data.split('\n', 3);
      if (rest !== undefined) done(line as string, stamp);
    });
    socket.on('error', () => done(null));
    socket.on('close', () => done(null));
  });
}

/** A `process.hrtime.bigint()` reading as this thread's `performance.now()`, given the latter's `now`. */
export const onThisClock = (ns: bigint, now = performance.now()) =>
  now - Number(process.hrtime.bigint() - ns) / 1e6;

/**
 * Probes until `host` answers with `expected`; resolves with the time it took (ms since `since`), or null
 * once `deadline` (epoch ms) has passed.
 */
export function until(
  port: number,
  host: string,
  expected: string,
  since: number,
  deadline: number,
  from: ProbeSource = systemSource,
): Promise<number | null> {
  // Often at first; after a few seconds a slow apply is measured to a quarter second, sparing the CPU.
  return probeUntil(port, host, (answer) => answer === expected, since, deadline, {
    from,
    pauseMs: (elapsed) => (elapsed < 3_000 ? 15 : 250),
  });
}

/**
 * Probes one after another (at most 20 000), `pauseMs` (of the ms since `since`) apart, until one's outcome
 * is what `proves` wants: that outcome, or null once `deadline` (epoch ms) has passed.
 */
export async function firstProbe<T>(
  next: () => Promise<T>,
  proves: (outcome: T) => boolean,
  since: number,
  deadline: number,
  pauseMs: (elapsed: number) => number,
): Promise<T | null> {
  for (let i = 0; i < 20_000; i++) {
    const outcome = await next();
    if (proves(outcome)) return outcome;
    if (Date.now() > deadline) return null;
    await sleep(pauseMs(performance.now() - since));
  }
  return null;
}

/**
 * Handshakes (`firstProbe`) until one's answer is what `proves` wants: the time it took (ms since `since` to
 * when that answer was known, `probeTimed`), or null once `deadline` (epoch ms) has passed.
 */
export async function probeUntil(
  port: number,
  host: string,
  proves: (answer: string | null) => boolean,
  since: number,
  deadline: number,
  o: { from?: ProbeSource; pauseMs: (elapsed: number) => number },
): Promise<number | null> {
  const from = o.from ?? systemSource;
  const first = await firstProbe(
    () => probeTimed(port, host, 1_000, from()),
    (p) => proves(p.answer),
    since,
    deadline,
    o.pauseMs,
  );
  return first && first.at - since;
}

/**
 * Probes every (host, expected) pair until each has answered as expected, `concurrency` at a time. Resolves
 * with the time the last one first did (ms since `since`), or null with how many were left at the deadline.
 */
export async function untilAll(
  port: number,
  targets: Array<{ host: string; expected: string }>,
  since: number,
  deadline: number,
  concurrency = 16,
  from: ProbeSource = systemSource,
): Promise<{ ms: number | null; missing: number }> {
  let worst = 0;
  let missing = 0;
  let next = 0;
  const worker = async () => {
    while (next < targets.length) {
      const t = targets[next++];
      if (!t) break;
      const ms = await until(port, t.host, t.expected, since, deadline, from);
      if (ms === null) missing++;
      else worst = Math.max(worst, ms);
    }
  };
  await Promise.all(Array.from({ length: Math.min(concurrency, targets.length) }, worker));
  return { ms: missing > 0 ? null : worst, missing };
}

function openHeld(port: number, host: string, into: TLSSocket[]): Promise<void> {
  return new Promise<void>((resolve) => {
    const socket = connect({ host: '127.0.0.1', port, servername: host, rejectUnauthorized: false });
    const timer = setTimeout(() => {
      socket.destroy();
      resolve();
    }, 3_000);
    socket.on('error', () => resolve());
    socket.once('data', () => {
      clearTimeout(timer);
      into.push(socket);
      resolve();
    });
  });
}

/**
 * Long-lived connections through HAProxy, like kubectl watches: a few at first, then a new one every
 * `everyMs` (at most `max`) until `stop()`. Each reload leaves the old worker alive while connections it
 * accepted stay open: that is what "workers alive after the burst" counts.
 */
export async function watchers(
  port: number,
  hosts: string[],
  everyMs: number,
  max: number,
): Promise<{ stop(): number; close(): void }> {
  const sockets: TLSSocket[] = [];
  await Promise.all(hosts.slice(0, 4).map((h) => openHeld(port, h, sockets)));
  let i = 0;
  let started = 0;
  const timer = setInterval(() => {
    if (started >= max) return;
    started++;
    void openHeld(port, hosts[i++ % hosts.length] as string, sockets);
  }, everyMs);
  return {
    stop: () => {
      clearInterval(timer);
      return sockets.length;
    },
    close: () => {
      clearInterval(timer);
      for (const s of sockets) s.destroy();
    },
  };
}
