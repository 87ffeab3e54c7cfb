// A refusal proven by a ClientHello alone: HAProxy decides on the hello (its SNI, the client's source), and
// a connection it refuses is closed before any byte comes back, while one it lets in gets the API server's
// ServerHello. The client then need not finish a handshake, nor wait for one, to learn which it was.
import { connect as netConnect } from 'node:net';
import { Duplex } from 'node:stream';
import { connect } from 'node:tls';
import { firstProbe } from '../compare/identity.js';

const hellos = new Map<string, Promise<Buffer>>();

/**
 * The ClientHello Node's own TLS client sends for `host` (SNI), captured once as bytes: one whole TLS
 * handshake record (type 22), checked. Sent again as it is, it is answered as any hello is (the server's
 * ServerHello); nothing here finishes a handshake, so its key share is never used.
 */
export function clientHello(host: string): Promise<Buffer> {
  let hello = hellos.get(host);
  if (!hello) {
    hello = new Promise<Buffer>((resolve, reject) => {
      const wire = new Duplex({
        read() {},
        write(chunk: Buffer, _encoding, callback) {
          callback();
          // The hello is written within `connect` itself, before `tls` below is assigned.
          setImmediate(() => tls.destroy());
          const record = Buffer.from(chunk);
          if (record[0] === 22 && record.length === 5 + record.readUInt16BE(3)) resolve(record);
          else reject(new Error(`the first bytes for ${host} are not one handshake record`));
        },
      });
      const tls = connect({ socket: wire, servername: host, rejectUnauthorized: false });
      tls.on('error', () => {});
    });
    hellos.set(host, hello);
  }
  return hello;
}

/**
 * One connection to HAProxy from `localAddress` that sends `hello`: 'let in' at the first byte back, 'refused'
 * when it is closed with none, null if it could not connect or neither came within `timeoutMs`. `at`
 * (`performance.now()`) is when that was known.
 */
export function helloProbe(
  port: number,
  hello: Buffer,
  localAddress: string,
  timeoutMs = 1_000,
): Promise<{ outcome: 'let in' | 'refused' | null; at: number }> {
  return new Promise((resolve) => {
    let connected = false;
    let settled = false;
    const socket = netConnect({ host: '127.0.0.1', port, localAddress });
    const done = (outcome: 'let in' | 'refused' | null) => {
      if (settled) return;
      settled = true;
      const at = performance.now();
      clearTimeout(timer);
      socket.destroy();
      resolve({ outcome, at });
    };
    const timer = setTimeout(() => done(null), timeoutMs);
    socket.once('connect', () => {
      connected = true;
      socket.write(hello);
    });
    socket.once('data', () => done('let in'));
    socket.on('error', () => done(connected ? 'refused' : null));
    socket.on('close', () => done(connected ? 'refused' : null));
  });
}

/**
 * Hellos from `source` for `host`, `pauseMs` apart (`firstProbe`), until one is refused: ms since `since`
 * (`performance.now()`) to that close, or null once `deadline` (epoch ms) has passed.
 */
export async function untilHelloRefused(
  port: number,
  host: string,
  source: string,
  since: number,
  deadline: number,
  pauseMs = 1,
): Promise<number | null> {
  const hello = await clientHello(host);
  const first = await firstProbe(
    () => helloProbe(port, hello, source),
    (p) => p.outcome === 'refused',
    since,
    deadline,
    () => pauseMs,
  );
  return first && first.at - since;
}
