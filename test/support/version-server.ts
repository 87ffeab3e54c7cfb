import { createServer, request, type Server } from 'node:https';
import type { LookupFunction } from 'node:net';
import { testKeyPair } from './tls.js';
import { waitFor } from './wait.js';

/**
 * A stand-in for a vCluster API server: HTTPS on a loopback address, answering `GET /version` with a
 * Kubernetes-style version document that carries its own identity, so a client can tell which server it reached.
 */
export interface VersionServer {
  identity: string | ((servername: string) => string);
  address: string;
  port: number;
  /** SNI values seen: HAProxy passes the ClientHello through untouched. */
  seenServernames: string[];
  close(): Promise<void>;
}

export async function startVersionServer(
  /** What `/version` says; a function of the SNI lets one server stand in for many clusters. */
  identity: string | ((servername: string) => string),
  options: { address?: string; port?: number } = {},
): Promise<VersionServer> {
  const address = options.address ?? '127.0.0.1';
  const seenServernames: string[] = [];
  const server: Server = createServer(testKeyPair(), (req, res) => {
    if (req.method === 'GET' && req.url === '/version') {
      res.writeHead(200, { 'content-type': 'application/json' });
      const servername = (req.socket as unknown as { servername?: string }).servername ?? '';
      const who = typeof identity === 'function' ? identity(servername) : identity;
      res.end(
        JSON.stringify({
          major: '1',
          minor: '31',
          gitVersion: 'v1.31.0',
          platform: 'linux/amd64',
          identity: who,
        }),
      );
      return;
    }
    res.writeHead(404).end();
  });
  server.on('secureConnection', (socket) => {
    seenServernames.push((socket as unknown as { servername?: string }).servername ?? '');
  });
  server.on('tlsClientError', () => {});
  // Watch-like clients would hold connections: close them on stop instead of waiting.
  server.keepAliveTimeout = 1000;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, address, () => resolve());
  });
  const bound = server.address();
  if (bound === null || typeof bound === 'string') throw new Error('version server has no port');
  return {
    identity,
    address,
    port: bound.port,
    seenServernames,
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

export type VersionAnswer = { identity: string; status: number } | { failed: string };

// Every name resolves to 127.0.0.1: the TLS client still sends the URL's host as SNI, as kubectl would.
const loopback: LookupFunction = (_host, options, callback) => {
  if ((options as { all?: boolean }).all)
    (callback as unknown as (e: null, a: Array<{ address: string; family: number }>) => void)(null, [
      { address: '127.0.0.1', family: 4 },
    ]);
  else callback(null, '127.0.0.1', 4);
};

/**
 * `GET <url>/version` over TLS to 127.0.0.1 with the URL's host (or `servername`) as SNI, like
 * `curl -k https://<host>:<port>/version` against a DNS name that points at the HAProxy host.
 */
export function getVersion(
  url: string,
  options: { servername?: string; timeoutMs?: number; localAddress?: string } = {},
): Promise<VersionAnswer> {
  const u = new URL('/version', url);
  return new Promise((resolve) => {
    let settled = false;
    const done = (answer: VersionAnswer) => {
      if (settled) return;
      settled = true;
      resolve(answer);
    };
    const req = request(
      {
        host: u.hostname,
        port: Number(u.port || 443),
        path: u.pathname,
        servername: options.servername ?? u.hostname,
        lookup: loopback,
        rejectUnauthorized: false,
        agent: false,
        timeout: options.timeoutMs ?? 3000,
        // The client's own address (127.0.0.2, say): the source authorized networks judge.
        ...(options.localAddress ? { localAddress: options.localAddress } : {}),
      },
      (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => {
          body += chunk;
        });
        res.on('end', () => {
          try {
            done({ identity: String(JSON.parse(body).identity), status: res.statusCode ?? 0 });
          } catch {
            done({ failed: `unexpected body ${body.slice(0, 100)}` });
          }
        });
        res.on('error', (err) => done({ failed: err.message }));
      },
    );
    req.on('timeout', () => {
      req.destroy();
      done({ failed: 'timeout' });
    });
    req.on('error', (err: NodeJS.ErrnoException) => done({ failed: err.code ?? err.message }));
    req.end();
  });
}

/** Polls `getVersion` until it reaches `identity` (or, with `null`, until nothing answers); the answer. */
export function waitForIdentity(
  url: string,
  identity: string | null,
  options: { servername?: string; timeoutMs?: number; localAddress?: string } = {},
): Promise<VersionAnswer> {
  const probe = () =>
    getVersion(url, {
      ...(options.servername ? { servername: options.servername } : {}),
      ...(options.localAddress ? { localAddress: options.localAddress } : {}),
      timeoutMs: 2000,
    });
  return waitFor(probe, options.timeoutMs ?? 15_000, `${url} to answer as ${identity ?? 'nobody'}`, {
    ok: (answer) =>
      identity === null ? 'failed' in answer : 'identity' in answer && answer.identity === identity,
    // Often: the e2e suite measures how soon a change is routable.
    everyMs: 25,
  });
}
