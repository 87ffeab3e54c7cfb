import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import {
  type ConnectionGate,
  DEFAULT_GATE_LIMITS,
  type GateLimits,
  gateConnections,
  type RequestListener,
} from './connection-gate.js';

export interface ServerTimes {
  /** Longest a client may take to send a request line and headers (408, then closed). */
  headersTimeoutMs: number;
  /** Longest a client may take to send a whole request; the app's own body limit comes first. */
  requestTimeoutMs: number;
  /** Longest a kept-alive connection may stay idle between requests. */
  keepAliveTimeoutMs: number;
  /** How often Node looks for connections past either deadline: a slow client is closed this much late at most. */
  checkIntervalMs: number;
}

export const DEFAULT_HEADERS_TIMEOUT_MS = 10_000;

/** The defaults README states: headers within 10 s, checked every second. */
export function serverTimes(bodyTimeoutMs: number): ServerTimes {
  return {
    headersTimeoutMs: DEFAULT_HEADERS_TIMEOUT_MS,
    requestTimeoutMs: DEFAULT_HEADERS_TIMEOUT_MS + bodyTimeoutMs + 5_000,
    keepAliveTimeoutMs: 5_000,
    checkIntervalMs: 1_000,
  };
}

export interface WebhookServer {
  server: Server;
  gate: ConnectionGate;
}

// Answers to `Expect: 100-continue` not yet given: the 100 is sent only once the headers pass the checks.
const awaitingContinue = new WeakSet<ServerResponse>();

/**
 * Sends `100 Continue` to a client that waits for it before sending its body; call it right before reading
 * the body. Without it the client's credentials would be invited to send a body they have no right to.
 */
export function continueIfAsked(res: ServerResponse): void {
  if (awaitingContinue.delete(res)) res.writeContinue();
}

/**
 * The HTTP server in front of the webhook app: Node's bounds on slow clients (checked every second, not
 * every 30 s), pipelined requests answered one at a time per connection (`gateConnections`), duplicate
 * `Host` headers refused, and `Expect: 100-continue` answered only after the headers are checked.
 */
export function createWebhookServer(
  app: RequestListener,
  times: ServerTimes,
  limits: GateLimits = DEFAULT_GATE_LIMITS,
): WebhookServer {
  const gate = gateConnections(refuseDuplicateHost(app), limits);
  const server = createServer({
    headersTimeout: times.headersTimeoutMs,
    requestTimeout: times.requestTimeoutMs,
    keepAliveTimeout: times.keepAliveTimeoutMs,
    connectionsCheckingInterval: times.checkIntervalMs,
  });
  server.on('request', gate.listener);
  // With a listener here Node leaves the 100 to the app (continueIfAsked), instead of sending it at once.
  server.on('checkContinue', (req: IncomingMessage, res: ServerResponse) => {
    awaitingContinue.add(res);
    gate.listener(req, res);
  });
  return { server, gate };
}

// Node keeps the first of two Host headers; a proxy in front may have routed by the other.
function refuseDuplicateHost(app: RequestListener): RequestListener {
  return (req, res) => {
    let hosts = 0;
    for (let i = 0; i < req.rawHeaders.length; i += 2)
      if (req.rawHeaders[i]?.toLowerCase() === 'host') hosts++;
    if (hosts <= 1) return app(req, res);
    const body = JSON.stringify({
      error: 'invalid_request',
      reason: 'duplicate_host',
      detail: 'the request has more than one Host header',
    });
    res.writeHead(400, {
      'content-type': 'application/json; charset=utf-8',
      'content-length': Buffer.byteLength(body),
      connection: 'close',
    });
    res.end(body);
  };
}

/** Listens on `host:port` and resolves once bound. */
export function listen(server: Server, host: string, port: number): Promise<void> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
}
