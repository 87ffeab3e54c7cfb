import { connect, createServer, type Server } from 'node:tls';
import { selfSignedKeyPair } from '../../scripts/lib/self-signed.mjs';

export interface KeyPair {
  key: Buffer;
  cert: Buffer;
}

let cached: KeyPair | undefined;

/** A throw-away self-signed certificate, made once per process at test time. */
export function testKeyPair(): KeyPair {
  cached ??= selfSignedKeyPair('kubebyon-test-backend');
  return cached;
}

export interface NamedTlsServer {
  name: string;
  port: number;
  /** SNI values this server saw, in order: proves HAProxy passed the ClientHello through untouched. */
  seenServernames: string[];
  close(): Promise<void>;
}

/** A TLS server on 127.0.0.1 that answers every connection with its own name, then closes. */
export async function startNamedTlsServer(name: string): Promise<NamedTlsServer> {
  const seenServernames: string[] = [];
  const server: Server = createServer(testKeyPair(), (socket) => {
    seenServernames.push(socket.servername || '');
    socket.end(`${name}\n`);
  });
  server.on('tlsClientError', () => {});
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const address = server.address();
  if (address === null || typeof address === 'string') throw new Error('TLS server has no port');
  return {
    name,
    port: address.port,
    seenServernames,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}

export type SniProbeResult = { reached: string } | { failed: string };

/**
 * A real TLS handshake to 127.0.0.1:port carrying `servername` as SNI; resolves with the name the backend
 * answered, or with why no backend answered (HAProxy closes connections that match no route).
 */
export function sniProbe(port: number, servername: string, timeoutMs = 3000): Promise<SniProbeResult> {
  return new Promise((resolve) => {
    let data = '';
    let settled = false;
    const done = (result: SniProbeResult) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      socket.destroy();
      resolve(result);
    };
    const socket = connect({ host: '127.0.0.1', port, servername, rejectUnauthorized: false });
    const timer = setTimeout(() => done({ failed: 'timeout' }), timeoutMs);
    socket.setEncoding('utf8');
    socket.on('data', (chunk: string) => {
      data += chunk;
      if (data.includes('\n')) done({ reached: data.trim() });
    });
    socket.on('error', (err: NodeJS.ErrnoException) => done({ failed: err.code ?? err.message }));
    socket.on('close', () => done(data ? { reached: data.trim() } : { failed: 'closed' }));
  });
}
