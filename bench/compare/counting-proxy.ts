import { appendFileSync } from 'node:fs';
import { Agent, createServer, request, type Server } from 'node:http';

export interface Counts {
  requests: number;
  /** Requests other than GET: what changed (or tried to change) the configuration. */
  writes: number;
  transactions: number;
  bytesSent: number;
  bytesReceived: number;
}

export const zeroCounts = (): Counts => ({
  requests: 0,
  writes: 0,
  transactions: 0,
  bytesSent: 0,
  bytesReceived: 0,
});

export function minus(a: Counts, b: Counts): Counts {
  return {
    requests: a.requests - b.requests,
    writes: a.writes - b.writes,
    transactions: a.transactions - b.transactions,
    bytesSent: a.bytesSent - b.bytesSent,
    bytesReceived: a.bytesReceived - b.bytesReceived,
  };
}

export interface CountingProxy {
  url: string;
  counts(): Counts;
  /** Requests forwarded whose answer has not been sent back completely yet. */
  inFlight(): number;
  close(): Promise<void>;
}

const headerBytes = (headers: Record<string, unknown>) =>
  Object.entries(headers).reduce((n, [k, v]) => n + k.length + String(v).length + 4, 0);

/**
 * An HTTP proxy on 127.0.0.1 in front of the Data Plane API that counts every request, its bytes both ways
 * (request line, headers and body) and the transactions opened. Large headers pass (a runtime-actions
 * header can carry thousands of commands). With `BENCH_API_LOG=<file>`, every request is appended there as
 * a JSON line when its answer ends: start (ms since the epoch), method, path, status, ms, bytes received.
 */
export async function startCountingProxy(target: string): Promise<CountingProxy> {
  const upstream = new URL(target);
  const c = zeroCounts();
  let inFlight = 0;
  const agent = new Agent({ keepAlive: true, maxSockets: 16 });
  const server: Server = createServer({ maxHeaderSize: 16 * 1024 * 1024 }, (req, res) => {
    const method = req.method ?? 'GET';
    const path = req.url ?? '/';
    const logFile = process.env.BENCH_API_LOG;
    const started = Date.now();
    let received = 0;
    c.requests++;
    inFlight++;
    res.once('close', () => {
      inFlight--;
    });
    if (method !== 'GET') c.writes++;
    if (method === 'POST' && /^\/v3\/services\/haproxy\/transactions(\?|$)/.test(path)) c.transactions++;
    c.bytesSent += method.length + path.length + 12 + headerBytes(req.headers);
    const out = request(
      {
        host: upstream.hostname,
        port: upstream.port,
        method,
        path,
        headers: req.headers,
        agent,
      },
      (answer) => {
        c.bytesReceived += 15 + headerBytes(answer.headers);
        answer.on('data', (chunk: Buffer) => {
          c.bytesReceived += chunk.length;
          received += chunk.length;
        });
        if (logFile)
          answer.on('end', () =>
            appendFileSync(
              logFile,
              `${JSON.stringify({ t: started, method, path, status: answer.statusCode, ms: Date.now() - started, bytes: received })}\n`,
            ),
          );
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        answer.pipe(res);
      },
    );
    req.on('data', (chunk: Buffer) => {
      c.bytesSent += chunk.length;
    });
    out.on('error', () => res.destroy());
    req.pipe(out);
  });
  server.keepAliveTimeout = 30_000;
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  const address = server.address();
  if (address === null || typeof address === 'string') throw new Error('proxy has no port');
  return {
    url: `http://127.0.0.1:${address.port}`,
    counts: () => ({ ...c }),
    inFlight: () => inFlight,
    close: () =>
      new Promise((resolve) => {
        agent.destroy();
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
