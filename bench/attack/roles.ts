/**
 * The three kinds of process of the attack bench, each its own Node process (so that the attacker's load does
 * not sit in the event loop that times the legitimate handshakes), driven by the orchestrator over IPC:
 *
 * - backend:  the cluster's TLS server (127.0.0.1): completes every handshake, echoes what it reads (or, asked
 *             with `S`, pushes a byte every 2 s), never closes.
 * - legit:    a kubectl-like client from 127.0.0.2: one TLS handshake with SNI every `intervalMs` (to each of
 *             `probeHosts` in turn), timed from connect() to the server's certificate; and two watch streams held through HAProxy for the whole
 *             run (one exchanges a byte every 3 s, one stays idle 40 s between bytes, longer than `timeout
 *             client`), reopened and counted when cut.
 * - attacker: one attack from 127.0.0.1, bounded in connections attempted and in time.
 *
 * All traffic is on loopback. Every loop has a count and a deadline.
 */
import { connect as netConnect, type Socket } from 'node:net';
import { monitorEventLoopDelay, performance } from 'node:perf_hooks';
import { type ConnectionOptions, createServer, type TLSSocket, connect as tlsConnect } from 'node:tls';
import { testKeyPair } from '../../test/support/tls.js';
import { clientHello, randomHost } from './hello.js';

type Send = (message: unknown) => void;
const send: Send = (m) => process.send?.(m);
const now = () => performance.now();

/** Leaves when the orchestrator goes away (IPC closed) or after `maxMs` whatever happens. */
function lifeline(maxMs: number, onExit: () => void = () => {}): void {
  const bye = () => {
    onExit();
    process.exit(0);
  };
  process.on('disconnect', bye);
  setTimeout(bye, maxMs).unref();
}

/**
 * A TLS client connection through HAProxy on 127.0.0.1:port with SNI `servername`, from `localAddress` (bound
 * before connect()), or from 127.0.0.1 chosen by connect() itself when `localAddress` is undefined.
 */
function tlsFrom(localAddress: string | undefined, port: number, servername: string): TLSSocket {
  // net.connect's localAddress, which tls.connect passes on (its type does not list it).
  const options: ConnectionOptions & { localAddress?: string } = {
    host: '127.0.0.1',
    port,
    ...(localAddress ? { localAddress } : {}),
    servername,
    rejectUnauthorized: false,
  };
  return tlsConnect(options);
}

export function percentile(sorted: readonly number[], p: number): number | null {
  if (sorted.length === 0) return null;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[i] as number;
}

// ---------------------------------------------------------------------------------------------------------
// backend

export function backendRole(maxMs: number): void {
  lifeline(maxMs);
  // This process's own event-loop delay: a stall here delays every handshake through it (not HAProxy's doing).
  const loop = monitorEventLoopDelay({ resolution: 10 });
  loop.enable();
  let current = 0;
  let handshakes = 0;
  let clientErrors = 0;
  const server = createServer(testKeyPair(), (socket: TLSSocket) => {
    current++;
    handshakes++;
    // Echoes what it reads; `S` starts a server push instead (a byte every 2 s, like a watch's events).
    let push: NodeJS.Timeout | undefined;
    socket.on('data', (d: Buffer) => {
      if (d.includes(0x53) && push === undefined) push = setInterval(() => socket.write('e'), 2_000);
      else socket.write(d);
    });
    socket.on('error', () => {});
    socket.on('close', () => {
      clearInterval(push);
      current--;
    });
  });
  // HAProxy's health checks connect and close without TLS.
  server.on('tlsClientError', () => clientErrors++);
  server.listen(0, '127.0.0.1', () => {
    const a = server.address();
    send({ ready: true, port: typeof a === 'object' && a ? a.port : 0 });
  });
  process.on('message', (m: { stats?: boolean }) => {
    if (m.stats) {
      const loopMaxMs = Math.round(loop.max / 1e6);
      const loopP99Ms = Math.round(loop.percentile(99) / 1e6);
      loop.reset();
      send({ stats: { current, handshakes, clientErrors, loopMaxMs, loopP99Ms } });
    }
  });
}

// ---------------------------------------------------------------------------------------------------------
// legit

export interface LegitParams {
  port: number;
  /** The watch streams' host. */
  host: string;
  /** The handshakes' hosts, in turn (failures to a host other than `host` are counted under its name). */
  probeHosts: string[];
  localAddress: string;
  intervalMs: number;
  timeoutMs: number;
  activeWatchEveryMs: number;
  idleWatchEveryMs: number;
  maxMs: number;
}

interface PhaseSamples {
  attempted: number;
  ms: number[];
  /** TCP connect() alone (bind, SYN, SYN-ACK: the kernel's part, before HAProxy accepts), successful probes. */
  connectMs: number[];
  failures: Record<string, number>;
  cuts: Array<{ stream: string; reason: string; openForMs: number }>;
  pings: number;
  pingMaxMs: number;
  peakOutstanding: number;
  /** When the phase started (ms, this process's clock) and, per second of it, handshakes started and the slowest. */
  startedAt: number;
  perSecond: Array<{ n: number; maxMs: number; failed: number }>;
  /** This process's own event-loop delay during the phase (ms): it adds to every handshake timed here. */
  loopMaxMs: number;
  loopP99Ms: number;
}

export interface LegitSummary {
  phase: string;
  attempted: number;
  ok: number;
  failed: number;
  failures: Record<string, number>;
  p50: number | null;
  p90: number | null;
  p99: number | null;
  max: number | null;
  connectP50: number | null;
  connectP99: number | null;
  cuts: PhaseSamples['cuts'];
  watchPings: number;
  watchPingMaxMs: number;
  peakOutstanding: number;
  /** Per second of the phase (by when each handshake started): started, slowest successful (ms), failed. */
  perSecond: Array<{ n: number; maxMs: number; failed: number }>;
  loopMaxMs: number;
  loopP99Ms: number;
}

export function legitRole(p: LegitParams): void {
  let phase = 'init';
  const phases = new Map<string, PhaseSamples>();
  const samples = (name = phase) => {
    let s = phases.get(name);
    if (!s) {
      s = {
        attempted: 0,
        ms: [],
        connectMs: [],
        failures: {},
        cuts: [],
        pings: 0,
        pingMaxMs: 0,
        peakOutstanding: 0,
        startedAt: now(),
        perSecond: [],
        loopMaxMs: 0,
        loopP99Ms: 0,
      };
      phases.set(name, s);
    }
    return s;
  };
  let outstanding = 0;
  let stopping = false;
  const open = new Set<Socket>();

  let probes = 0;
  const probe = () => {
    const host = p.probeHosts[probes++ % p.probeHosts.length] ?? p.host;
    const s = samples();
    s.attempted++;
    outstanding++;
    s.peakOutstanding = Math.max(s.peakOutstanding, outstanding);
    const t0 = now();
    const second = Math.floor((t0 - s.startedAt) / 1000);
    while (s.perSecond.length <= second) s.perSecond.push({ n: 0, maxMs: 0, failed: 0 });
    const slot = s.perSecond[second] as { n: number; maxMs: number; failed: number };
    slot.n++;
    let connectedAt: number | undefined;
    let done = false;
    const finish = (failure: string | null) => {
      if (done) return;
      done = true;
      outstanding--;
      clearTimeout(timer);
      socket.destroy();
      open.delete(socket);
      if (failure === null) {
        s.ms.push(now() - t0);
        slot.maxMs = Math.max(slot.maxMs, Math.round(now() - t0));
        if (connectedAt !== undefined) s.connectMs.push(connectedAt - t0);
      } else {
        const key = host === p.host ? failure : `${failure} (${host})`;
        s.failures[key] = (s.failures[key] ?? 0) + 1;
        slot.failed++;
      }
    };
    const socket = tlsFrom(p.localAddress, p.port, host);
    open.add(socket);
    const timer = setTimeout(() => finish('timeout'), p.timeoutMs);
    socket.once('connect', () => {
      connectedAt = now();
    });
    socket.on('secureConnect', () => {
      const cn = socket.getPeerCertificate()?.subject?.CN;
      finish(cn === 'kubebyon-test-backend' ? null : `wrong certificate ${cn}`);
    });
    socket.on('error', (err: NodeJS.ErrnoException) => finish(err.code ?? err.message));
    socket.on('close', () => finish('closed'));
  };
  const ticker = setInterval(() => {
    if (!stopping && outstanding < 400) probe();
  }, p.intervalMs);

  // A watch stream: a TLS connection through HAProxy to the cluster, a byte every `everyMs` echoed back.
  const watch = (name: string, everyMs: number) => {
    let socket: TLSSocket | undefined;
    let openedAt = 0;
    let pingTimer: NodeJS.Timeout | undefined;
    let pending: number | undefined;
    const start = () => {
      if (stopping) return;
      let cut = false;
      const onCut = (reason: string) => {
        if (cut) return;
        cut = true;
        clearInterval(pingTimer);
        if (stopping) return;
        samples().cuts.push({ stream: name, reason, openForMs: Math.round(now() - openedAt) });
        setTimeout(start, 200);
      };
      const s = tlsFrom(p.localAddress, p.port, p.host);
      socket = s;
      open.add(s);
      openedAt = now();
      s.on('secureConnect', () => {
        pingTimer = setInterval(() => {
          if (pending !== undefined && now() - pending > 5_000) {
            s.destroy();
            onCut('no echo within 5 s');
            return;
          }
          pending = now();
          s.write('w');
        }, everyMs);
      });
      s.on('data', () => {
        if (pending === undefined) return;
        const ms = now() - pending;
        const ss = samples();
        ss.pings++;
        ss.pingMaxMs = Math.max(ss.pingMaxMs, ms);
        pending = undefined;
      });
      s.on('error', (err: NodeJS.ErrnoException) => onCut(err.code ?? err.message));
      s.on('close', () => onCut('closed by peer'));
    };
    start();
    return () => {
      clearInterval(pingTimer);
      socket?.destroy();
    };
  };
  const stopActive = watch('active watch (1 byte / 3 s)', p.activeWatchEveryMs);
  const stopIdle = watch('idle watch (1 byte / 40 s)', p.idleWatchEveryMs);

  const stop = () => {
    stopping = true;
    clearInterval(ticker);
    stopActive();
    stopIdle();
    for (const s of open) s.destroy();
  };
  lifeline(p.maxMs, stop);

  const loop = monitorEventLoopDelay({ resolution: 10 });
  loop.enable();
  process.on('message', (m: { phase?: string; report?: string; stop?: boolean }) => {
    if (m.phase !== undefined) {
      // The loop delay seen since the last phase change belongs to the phase that ends.
      const ending = samples();
      ending.loopMaxMs = Math.max(ending.loopMaxMs, Math.round(loop.max / 1e6));
      ending.loopP99Ms = Math.max(ending.loopP99Ms, Math.round(loop.percentile(99) / 1e6));
      loop.reset();
      phase = m.phase;
    }
    if (m.report !== undefined) send({ report: summarize(m.report, phases.get(m.report)) });
    if (m.stop) {
      stop();
      send({ stopped: true });
    }
  });
  send({ ready: true });
}

function summarize(phase: string, s: PhaseSamples | undefined): LegitSummary {
  const ms = [...(s?.ms ?? [])].sort((a, b) => a - b);
  const connect = [...(s?.connectMs ?? [])].sort((a, b) => a - b);
  const failed = Object.values(s?.failures ?? {}).reduce((a, b) => a + b, 0);
  const r = (x: number | null) => (x === null ? null : Math.round(x * 10) / 10);
  return {
    phase,
    attempted: s?.attempted ?? 0,
    ok: ms.length,
    failed,
    failures: s?.failures ?? {},
    p50: r(percentile(ms, 50)),
    p90: r(percentile(ms, 90)),
    p99: r(percentile(ms, 99)),
    max: r(ms.length ? (ms[ms.length - 1] as number) : null),
    connectP50: r(percentile(connect, 50)),
    connectP99: r(percentile(connect, 99)),
    cuts: s?.cuts ?? [],
    watchPings: s?.pings ?? 0,
    watchPingMaxMs: Math.round(s?.pingMaxMs ?? 0),
    peakOutstanding: s?.peakOutstanding ?? 0,
    perSecond: s?.perSecond ?? [],
    loopMaxMs: s?.loopMaxMs ?? 0,
    loopP99Ms: s?.loopP99Ms ?? 0,
  };
}

// ---------------------------------------------------------------------------------------------------------
// attacker

export type AttackKind =
  | 'no-hello-flood'
  | 'random-sni'
  | 'slow-hello'
  | 'idle-15k'
  | 'idle-after-tls'
  | 'refused-network';

export interface AttackParams {
  kind: AttackKind;
  port: number;
  host: string;
  /**
   * Where the attack comes from: connections to 127.0.0.1 come from 127.0.0.1 when connect() picks the source
   * itself, which it does here. An explicit bind() before connect() (what localAddress does) searches the port
   * range under the bind rules, where tens of thousands of sockets in TIME_WAIT make each bind slow and then
   * fail: the attacker would measure its own kernel, not HAProxy.
   */
  source: '127.0.0.1';
  durationMs: number;
  /** Connections attempted at most. */
  maxAttempts: number;
  /** Connections being opened at once. */
  concurrency: number;
  /** Connections held at once at most (each is an fd here). */
  hold: number;
  /** no-hello-flood: the attacker closes each connection this long after it is established. */
  churnMs: number;
  /** slow-hello: one byte of the ClientHello every this many ms. */
  byteIntervalMs: number;
}

export interface AttackSummary {
  kind: AttackKind;
  /** Processes the attack ran in (merged summaries). */
  workers?: number;
  ranMs: number;
  attempts: number;
  established: number;
  connectErrors: Record<string, number>;
  heldMax: number;
  /** Connections HAProxy closed (FIN or RST) before the attacker did. */
  closedByHaproxy: number;
  closedByHaproxyWithinMs: { p50: number | null; p99: number | null; max: number | null };
  closedByAttacker: number;
  bytesReceived: number;
  tlsHandshakes: number;
  hellosCompleted: number;
  /** refused-network: connections the cluster's server answered (a byte came back: the ClientHello got through). */
  answered: number;
  /** Per second: attempts, established and held. */
  timeline: Array<{ s: number; attempts: number; established: number; held: number }>;
}

export function attackerRole(p: AttackParams): void {
  const started = now();
  const deadline = started + p.durationMs;
  const counters = {
    attempts: 0,
    established: 0,
    connectErrors: {} as Record<string, number>,
    held: 0,
    heldMax: 0,
    closedByHaproxy: 0,
    closedByAttacker: 0,
    bytesReceived: 0,
    tlsHandshakes: 0,
    hellosCompleted: 0,
    answered: 0,
  };
  const lifetimes: number[] = [];
  const timeline: AttackSummary['timeline'] = [];
  let inflight = 0;
  let finished = false;
  /** Each open socket's end: called with `true` when the attacker closes it. */
  const live = new Map<Socket, (byAttacker: boolean, code?: string) => void>();
  const hello = clientHello(p.host);

  const over = () => finished || now() >= deadline || counters.attempts >= p.maxAttempts;

  const pump = () => {
    while (!over() && inflight < p.concurrency && counters.held + inflight < p.hold) openOne();
  };

  const openOne = () => {
    counters.attempts++;
    inflight++;
    let established = false;
    let ended = false;
    let establishedAt = 0;
    let timers: NodeJS.Timeout[] = [];
    const socket: Socket =
      p.kind === 'idle-after-tls'
        ? tlsFrom(undefined, p.port, p.host)
        : netConnect({ host: '127.0.0.1', port: p.port });
    const end = (byAttacker: boolean, code?: string) => {
      if (ended) return;
      ended = true;
      for (const t of timers) clearTimeout(t);
      timers = [];
      live.delete(socket);
      if (!established) {
        inflight--;
        const key = code ?? 'closed before established';
        counters.connectErrors[key] = (counters.connectErrors[key] ?? 0) + 1;
      } else {
        counters.held--;
        if (byAttacker) counters.closedByAttacker++;
        else {
          counters.closedByHaproxy++;
          if (lifetimes.length < 200_000) lifetimes.push(now() - establishedAt);
        }
      }
      socket.destroy();
      setImmediate(pump);
    };
    live.set(socket, end);
    const onEstablished = () => {
      if (established || ended) return;
      if (socket.localAddress !== p.source) {
        counters.connectErrors[`from ${socket.localAddress}`] = 1;
        finished = true;
      }
      established = true;
      establishedAt = now();
      inflight--;
      counters.established++;
      counters.held++;
      counters.heldMax = Math.max(counters.heldMax, counters.held);
      if (p.kind === 'no-hello-flood') timers.push(setTimeout(() => end(true), p.churnMs));
      if (p.kind === 'random-sni') {
        socket.write(clientHello(randomHost()));
        // Nothing answers an unknown SNI: HAProxy closes. Bounded anyway.
        timers.push(setTimeout(() => end(true), 10_000));
      }
      if (p.kind === 'refused-network') {
        // The restricted cluster's whole ClientHello at once; refused, HAProxy closes; let through, the
        // cluster's server answers and the attacker hangs up and starts again. Bounded anyway.
        socket.write(hello);
        timers.push(setTimeout(() => end(true), 10_000));
      }
      if (p.kind === 'slow-hello') {
        let i = 0;
        const next = () => {
          if (ended) return;
          if (i >= hello.length) {
            counters.hellosCompleted++;
            return;
          }
          socket.write(hello.subarray(i, i + 1));
          i++;
          timers.push(setTimeout(next, p.byteIntervalMs));
        };
        next();
      }
      pump();
    };
    if (p.kind === 'idle-after-tls') {
      socket.on('secureConnect', () => {
        counters.tlsHandshakes++;
        onEstablished();
      });
    } else socket.on('connect', onEstablished);
    socket.on('data', (d: Buffer) => {
      counters.bytesReceived += d.length;
      if (p.kind === 'refused-network' && !ended) {
        counters.answered++;
        end(true);
      }
    });
    socket.on('error', (err: NodeJS.ErrnoException) => end(false, err.code ?? err.message));
    socket.on('close', () => end(false));
  };

  const tick = setInterval(() => {
    timeline.push({
      s: Math.round((now() - started) / 1000),
      attempts: counters.attempts,
      established: counters.established,
      held: counters.held,
    });
    send({
      progress: { held: counters.held, attempts: counters.attempts, established: counters.established },
    });
    if (over()) finish();
    else pump();
  }, 1000);

  const finish = () => {
    if (finished) return;
    finished = true;
    clearInterval(tick);
    const ranMs = Math.round(now() - started);
    // What is still open is closed by the attacker at the end.
    for (const end of [...live.values()]) end(true, 'still connecting at the end');
    const sorted = lifetimes.sort((a, b) => a - b);
    const r = (x: number | null) => (x === null ? null : Math.round(x));
    const summary: AttackSummary = {
      kind: p.kind,
      ranMs,
      attempts: counters.attempts,
      established: counters.established,
      connectErrors: counters.connectErrors,
      heldMax: counters.heldMax,
      closedByHaproxy: counters.closedByHaproxy,
      closedByHaproxyWithinMs: {
        p50: r(percentile(sorted, 50)),
        p99: r(percentile(sorted, 99)),
        max: r(sorted.length ? (sorted[sorted.length - 1] as number) : null),
      },
      closedByAttacker: counters.closedByAttacker,
      bytesReceived: counters.bytesReceived,
      tlsHandshakes: counters.tlsHandshakes,
      hellosCompleted: counters.hellosCompleted,
      answered: counters.answered,
      timeline,
    };
    send({ done: summary });
    setTimeout(() => process.exit(0), 200);
  };
  lifeline(p.durationMs + 30_000, finish);
  process.on('message', (m: { stop?: boolean }) => {
    if (m.stop) finish();
  });
  pump();
}
