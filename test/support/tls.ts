import { isIP, connect as netConnect } from 'node:net';
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

export interface SniProbeOptions {
  /** Where to connect: 127.0.0.1 by default (`::1` for IPv6). */
  host?: string;
  /** The client's own address: the source HAProxy sees (authorized networks judge it). */
  localAddress?: string;
  /** Bytes written before the ClientHello: a PROXY protocol header (`proxyV2Header`). */
  preamble?: Buffer;
}

/**
 * A real TLS handshake to 127.0.0.1:port carrying `servername` as SNI; resolves with the name the backend
 * answered, or with why no backend answered (HAProxy closes connections that match no route).
 */
export function sniProbe(
  port: number,
  servername: string,
  timeoutMs = 3000,
  options: SniProbeOptions = {},
): Promise<SniProbeResult> {
  return new Promise((resolve) => {
    let data = '';
    let settled = false;
    const done = (result: SniProbeResult) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      socket.destroy();
      raw?.destroy();
      resolve(result);
    };
    const host = options.host ?? '127.0.0.1';
    // With a preamble, TCP first (the header goes before any TLS byte), then TLS over that socket.
    const raw =
      options.localAddress || options.preamble
        ? netConnect({ host, port, ...(options.localAddress ? { localAddress: options.localAddress } : {}) })
        : undefined;
    if (raw && options.preamble) raw.write(options.preamble);
    raw?.on('error', (err: NodeJS.ErrnoException) => done({ failed: err.code ?? err.message }));
    const socket = raw
      ? connect({ socket: raw, servername, rejectUnauthorized: false })
      : connect({ host, port, servername, rejectUnauthorized: false });
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

/**
 * A PROXY protocol v2 header (PROXY command, TCP) claiming the connection comes from `source` to
 * `destination`: the 12-byte signature, version 2 and command PROXY (0x21), the family (0x11 TCP over IPv4,
 * 0x21 TCP over IPv6), the address block's length, then the addresses and ports in network order.
 */
export function proxyV2Header(
  source: { address: string; port: number },
  destination: { address: string; port: number },
): Buffer {
  const family = isIP(source.address);
  if (family === 0 || family !== isIP(destination.address))
    throw new Error(`${source.address} and ${destination.address}: two addresses of one family`);
  const addr = (a: string) => (family === 4 ? ipv4Bytes(a) : ipv6Bytes(a));
  const block = Buffer.concat([addr(source.address), addr(destination.address), Buffer.alloc(4)]);
  block.writeUInt16BE(source.port, block.length - 4);
  block.writeUInt16BE(destination.port, block.length - 2);
  const head = Buffer.alloc(16);
  Buffer.from([0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d, 0x0a, 0x51, 0x55, 0x49, 0x54, 0x0a]).copy(head, 0);
  head[12] = 0x21;
  head[13] = family === 4 ? 0x11 : 0x21;
  head.writeUInt16BE(block.length, 14);
  return Buffer.concat([head, block]);
}

function ipv4Bytes(a: string): Buffer {
  return Buffer.from(a.split('.').map(Number));
}

function ipv6Bytes(a: string): Buffer {
  const [head = '', tail] = a.split('::');
  const groups = (s: string | undefined) => (s ? s.split(':') : []);
  const h = groups(head);
  const t = tail === undefined ? [] : groups(tail);
  const all = tail === undefined ? h : [...h, ...Array(8 - h.length - t.length).fill('0'), ...t];
  const out = Buffer.alloc(16);
  all.forEach((g, i) => {
    out.writeUInt16BE(Number.parseInt(g, 16), i * 2);
  });
  return out;
}
