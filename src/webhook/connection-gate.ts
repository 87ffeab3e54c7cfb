import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';

export type RequestListener = (req: IncomingMessage, res: ServerResponse) => void;

export interface GateLimits {
  /** Requests one connection may have unanswered, the one being answered included; it is closed beyond. */
  perConnection: number;
  /** Requests all connections together may have waiting behind another of theirs; a pipeliner is closed beyond. */
  waitingTotal: number;
  /** Longest a connection with requests waiting may leave its answers unread; it is closed after. */
  drainTimeoutMs: number;
}

export const DEFAULT_GATE_LIMITS: GateLimits = {
  perConnection: 16,
  waitingTotal: 256,
  drainTimeoutMs: 10_000,
};

interface Connection {
  running: boolean;
  waiting: Array<[IncomingMessage, ServerResponse]>;
}

export interface ConnectionGate {
  listener: RequestListener;
  /** Requests received and not yet answered (being answered, or waiting their turn). */
  unanswered(): number;
  /** Connections closed for what they had waiting, since the start. */
  closed(): number;
}

/**
 * Answers each connection's requests one at a time, in order. Node parses every request a client pipelines
 * in one read and hands them over at once: 5,000 `GET /metrics` sent without reading would run 5,000
 * handlers and hold 5,000 answers in memory. Here a request waits until the one before it is answered and
 * its answer has left the write buffer (backpressure); a connection with more than `perConnection`
 * unanswered, or any waiting while all connections together have `waitingTotal`, is closed. A client that
 * sends one request at a time (every client kubebyon-api or Prometheus uses) never waits here.
 */
export function gateConnections(handle: RequestListener, limits: GateLimits): ConnectionGate {
  const connections = new WeakMap<Socket, Connection>();
  let running = 0;
  let waiting = 0;
  let closed = 0;

  const connectionOf = (socket: Socket): Connection => {
    let c = connections.get(socket);
    if (!c) {
      const created: Connection = { running: false, waiting: [] };
      connections.set(socket, created);
      // Requests still waiting when the connection ends are never answered: they stop counting.
      socket.once('close', () => {
        waiting -= created.waiting.length;
        created.waiting = [];
      });
      c = created;
    }
    return c;
  };

  const close = (socket: Socket) => {
    closed++;
    socket.destroy();
  };

  const start = (socket: Socket, c: Connection, req: IncomingMessage, res: ServerResponse) => {
    c.running = true;
    running++;
    let done = false;
    const finished = () => {
      if (done) return;
      done = true;
      c.running = false;
      running--;
      next(socket, c);
    };
    res.once('finish', finished);
    res.once('close', finished);
    handle(req, res);
  };

  // The next waiting request runs once the answers before it have been taken by the client (or the kernel).
  const next = (socket: Socket, c: Connection) => {
    if (c.waiting.length === 0 || socket.destroyed) return;
    if (socket.writableNeedDrain) {
      const timer = setTimeout(() => close(socket), limits.drainTimeoutMs);
      const resume = () => {
        clearTimeout(timer);
        socket.off('close', resume);
        socket.off('drain', resume);
        next(socket, c);
      };
      socket.once('drain', resume);
      socket.once('close', resume);
      return;
    }
    const [req, res] = c.waiting.shift() as [IncomingMessage, ServerResponse];
    waiting--;
    start(socket, c, req, res);
  };

  const listener: RequestListener = (req, res) => {
    const socket = req.socket;
    if (socket.destroyed) return;
    const c = connectionOf(socket);
    if (!c.running) return start(socket, c, req, res);
    if (1 + c.waiting.length >= limits.perConnection || waiting >= limits.waitingTotal) return close(socket);
    c.waiting.push([req, res]);
    waiting++;
  };

  return { listener, unanswered: () => running + waiting, closed: () => closed };
}
