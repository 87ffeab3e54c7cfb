import { readFileSync } from 'node:fs';
import { createServer } from 'node:net';

/**
 * Ports are picked here and bound later by another process (HAProxy, etcd, the service), so a picked port
 * must not be taken in between. Picking below the kernel's ephemeral range keeps outgoing connections and
 * listen(0) (which both draw from that range) off it, and a port is handed out once per process.
 */
const FLOOR = 20_000;
const handedOut = new Set<number>();

function ephemeralLow(): number {
  try {
    const low = Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]);
    return Number.isInteger(low) && low > FLOOR + 1_000 ? low : 32_768;
  } catch {
    return 32_768;
  }
}

const CEILING = ephemeralLow();

function bindable(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.unref();
    server.once('error', () => resolve(false));
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)));
  });
}

/** A TCP port on 127.0.0.1 that was free a moment ago (host networking means we pick ports ourselves). */
export async function freeLoopbackPort(): Promise<number> {
  for (let attempt = 0; attempt < 200; attempt++) {
    const port = FLOOR + Math.floor(Math.random() * (CEILING - FLOOR));
    if (handedOut.has(port)) continue;
    if (await bindable(port)) {
      handedOut.add(port);
      return port;
    }
  }
  throw new Error(`no free loopback port between ${FLOOR} and ${CEILING} after 200 tries`);
}
