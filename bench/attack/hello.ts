import { randomBytes } from 'node:crypto';

/**
 * A well-formed TLS ClientHello record (TLS 1.2 record layer, offering TLS 1.3 and 1.2) carrying `servername`
 * as SNI: what HAProxy's `req.ssl_hello_type` and `req.ssl_sni` parse. No key share: nothing is meant to answer
 * it (the attacks send it raw, without a TLS stack behind).
 */
export function clientHello(servername: string): Buffer {
  const u16 = (n: number) => Buffer.from([(n >> 8) & 0xff, n & 0xff]);
  const u24 = (n: number) => Buffer.from([(n >> 16) & 0xff, (n >> 8) & 0xff, n & 0xff]);
  const ext = (type: number, body: Buffer) => Buffer.concat([u16(type), u16(body.length), body]);
  const name = Buffer.from(servername, 'ascii');
  const sni = Buffer.concat([u16(name.length + 3), Buffer.from([0]), u16(name.length), name]);
  const groups = Buffer.from([0x00, 0x04, 0x00, 0x1d, 0x00, 0x17]);
  const sigalgs = Buffer.from([0x00, 0x08, 0x04, 0x03, 0x08, 0x04, 0x04, 0x01, 0x05, 0x01]);
  const versions = Buffer.from([0x04, 0x03, 0x04, 0x03, 0x03]);
  const extensions = Buffer.concat([
    ext(0x0000, sni),
    ext(0x000a, groups),
    ext(0x000b, Buffer.from([0x01, 0x00])),
    ext(0x000d, sigalgs),
    ext(0x002b, versions),
  ]);
  const suites = [0x1301, 0x1302, 0x1303, 0xc02b, 0xc02f, 0xc02c, 0xc030];
  const body = Buffer.concat([
    Buffer.from([0x03, 0x03]),
    randomBytes(32),
    Buffer.from([32]),
    randomBytes(32),
    u16(suites.length * 2),
    Buffer.concat(suites.map(u16)),
    Buffer.from([1, 0]),
    u16(extensions.length),
    extensions,
  ]);
  const handshake = Buffer.concat([Buffer.from([0x01]), u24(body.length), body]);
  return Buffer.concat([Buffer.from([0x16, 0x03, 0x01]), u16(handshake.length), handshake]);
}

/** A host name no route has: random labels under the test domain. */
export function randomHost(): string {
  return `${randomBytes(6).toString('hex')}.${randomBytes(3).toString('hex')}.kubebyon.test`;
}
