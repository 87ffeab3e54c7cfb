/**
 * Which timeout closes what, on a real HAProxy, with the owned file's timeouts scaled down (client 3 s, server
 * 3 s, tunnel 8 s) so that each is seen in seconds: an idle connection before any ClientHello, one that sent
 * part of a ClientHello, a TLS session to the cluster idle both ways, and one where only the server speaks (a
 * watch stream's events, a byte every 2 s). Each with the frontend as written before the guard and with the
 * guard, the inspect delay below and above `timeout client`. One connection per case, from 127.0.0.2, each bounded at 20 s.
 */
import { connect as netConnect } from 'node:net';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { type ConnectionOptions, connect as tlsConnect } from 'node:tls';
import type { HaproxyVersion } from '../../test/support/haproxy-testbed.js';
import { HOST, preGuard, startAttackBed } from './bed.js';
import { clientHello } from './hello.js';

const FROM = '127.0.0.2';
const OBSERVE_MS = 20_000;

export interface TimeoutCase {
  variant: string;
  inspectDelayMs: number;
  case: string;
  /** When HAProxy closed the connection (ms after it was established, or after the TLS handshake), or null. */
  closedAfterMs: number | null;
  note: string;
}

export interface TimeoutsResult {
  version: HaproxyVersion;
  haproxyVersion: string;
  date: string;
  cases: TimeoutCase[];
}

/**
 * The owned file's timeouts scaled down, and its frontend as the adapter writes it (the guard) or as it did
 * before the guard, with `inspectDelayMs`.
 */
function variantFile(owned: string, hardened: boolean, inspectDelayMs: number): string {
  const scaled = owned
    .replace(/^ {2}timeout client 30s$/m, '  timeout client 3s')
    .replace(/^ {2}timeout server 30s$/m, '  timeout server 3s')
    .replace(/^ {2}timeout tunnel 4h$/m, '  timeout tunnel 8s');
  if (scaled === owned) throw new Error('the owned file has not the expected timeouts');
  const frontend = hardened ? scaled : preGuard(scaled, inspectDelayMs);
  return frontend.replace(
    /^ {2}tcp-request inspect-delay [0-9]+ms$/m,
    `  tcp-request inspect-delay ${inspectDelayMs}ms`,
  );
}

/** Resolves with ms from `since()` until the socket closes, or null if it is still open after OBSERVE_MS. */
function closeTime(
  socket: NodeJS.EventEmitter & { destroy(): void },
  since: () => number | null,
): Promise<number | null> {
  return new Promise((resolve) => {
    const timer = setTimeout(() => {
      socket.destroy();
      resolve(null);
    }, OBSERVE_MS);
    socket.on('error', () => {});
    socket.on('close', () => {
      clearTimeout(timer);
      const t = since();
      resolve(t === null ? -1 : Math.round(performance.now() - t));
    });
  });
}

async function caseIdle(port: number, partial: boolean): Promise<number | null> {
  const socket = netConnect({ host: '127.0.0.1', port, localAddress: FROM });
  let at: number | null = null;
  socket.on('connect', () => {
    at = performance.now();
    if (partial) socket.write(clientHello(HOST).subarray(0, 10));
  });
  return closeTime(socket, () => at);
}

async function caseTls(port: number, serverPush: boolean): Promise<{ ms: number | null; bytes: number }> {
  const options: ConnectionOptions & { localAddress: string } = {
    host: '127.0.0.1',
    port,
    localAddress: FROM,
    servername: HOST,
    rejectUnauthorized: false,
  };
  const socket = tlsConnect(options);
  let at: number | null = null;
  let bytes = 0;
  socket.on('secureConnect', () => {
    at = performance.now();
    if (serverPush) socket.write('S');
  });
  socket.on('data', (d: Buffer) => {
    bytes += d.length;
  });
  const ms = await closeTime(socket, () => at);
  return { ms, bytes };
}

export async function runTimeouts(version: HaproxyVersion, backendPort: number): Promise<TimeoutsResult> {
  const bed = await startAttackBed(version, backendPort);
  const cases: TimeoutCase[] = [];
  try {
    const info = await bed.cli('show info');
    const haproxyVersion = /^Version: (.*)$/m.exec(info)?.[1] ?? '';
    for (const hardened of [false, true])
      for (const inspectDelayMs of [2_000, 6_000]) {
        const variant = hardened ? 'guard' : 'before the guard';
        const text = variantFile(bed.ownedToday, hardened, inspectDelayMs);
        await bed.reloadWith(text);
        await sleep(300);
        const [idle, partial, tlsIdle, push] = await Promise.all([
          caseIdle(bed.port, false),
          caseIdle(bed.port, true),
          caseTls(bed.port, false),
          caseTls(bed.port, true),
        ]);
        const add = (name: string, ms: number | null, note = '') =>
          cases.push({ variant, inspectDelayMs, case: name, closedAfterMs: ms, note });
        add('idle, no byte sent', idle);
        add('10 bytes of a ClientHello, then idle', partial);
        add('TLS done, then idle both ways', tlsIdle.ms);
        add('TLS done, only the server sends (a byte every 2 s)', push.ms, `${push.bytes} bytes received`);
      }
    return { version, haproxyVersion, date: new Date().toISOString(), cases };
  } finally {
    await bed.stop();
  }
}

export function timeoutsMarkdown(results: TimeoutsResult[]): string {
  const lines = [
    '# bench/attack.ts --mode timeouts: which timeout closes what',
    '',
    "The owned file's `defaults kubebyon_adapter` scaled down to `timeout client 3s`, `timeout server 3s`,",
    '`timeout tunnel 8s` (as written: 30s, 30s, 4h), the frontend before the guard or with it, with the inspect delay',
    'below (2 s) and above (6 s) `timeout client`. One connection per case from 127.0.0.2; "closed after" counts',
    'from the TCP connection (first two cases) or the end of the TLS handshake (last two); "open" = still open',
    `after ${OBSERVE_MS / 1000} s (then closed by the client).`,
    '',
  ];
  for (const r of results) {
    lines.push(
      `## HAProxy ${r.haproxyVersion} (${r.version})`,
      '',
      '| frontend | inspect delay | case | closed by HAProxy after |',
      '| --- | --- | --- | --- |',
    );
    for (const c of r.cases)
      lines.push(
        `| ${c.variant} | ${c.inspectDelayMs} ms | ${c.case} | ${c.closedAfterMs === null ? `open${c.note ? ` (${c.note})` : ''}` : `${c.closedAfterMs} ms${c.note ? ` (${c.note})` : ''}`} |`,
      );
    lines.push('');
  }
  return `${lines.join('\n')}\n`;
}
