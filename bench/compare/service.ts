import { readFileSync } from 'node:fs';
import { request } from 'node:http';
import type { Socket } from 'node:net';
import { join, resolve } from 'node:path';
import { sign } from '../../src/webhook/auth.js';
import { type ServiceProcess, startServiceProcess } from '../../test/support/service-process.js';
import type { Target } from './targets.js';

export interface Resources {
  /** Resident set size now, and its peak since start (VmHWM), in MB. */
  rssMb: number;
  peakRssMb: number;
  /** User + system CPU time since start, in seconds. */
  cpuSeconds: number;
  /** V8 heap in use (the service's own objects), in MB: the rest of the RSS is code, libraries and slack. */
  heapUsedMb?: number | undefined;
}

/** The service as the comparison runs it: the shared service process, and what the bench reads of it. */
export interface BenchService extends ServiceProcess {
  /**
   * A signed webhook call (HMAC, as kubebyon-api sends it), without a client-side timeout. `sent` hears
   * when the request went to the socket (`process.hrtime.bigint()`, read as the request is flushed).
   */
  call(
    method: string,
    path: string,
    body?: unknown,
    sent?: (at: bigint) => void,
  ): Promise<{ status: number; body: string }>;
  metrics(): Promise<Map<string, number>>;
  resources(): Resources;
}

/**
 * The service's environment in a bench: `target`'s provider, its state file in `dir`, its topology from the
 * kube-apiserver at `kubeconfig`, routes on the target's SNI port, and limits no bench reaches.
 */
export function benchServiceEnv(target: Target, kubeconfig: string, dir: string): Record<string, string> {
  return {
    ...target.providerEnv(),
    KUBEBYON_STATE_FILE: join(dir, 'clusters.json'),
    KUBEBYON_LOG_LEVEL: 'warn',
    KUBEBYON_TOPOLOGY: 'kubernetes',
    KUBECONFIG: kubeconfig,
    KUBEBYON_HAPROXY_BIND_ADDR: `127.0.0.1:${target.sniPort}`,
    KUBEBYON_PUBLIC_PORT: String(target.sniPort),
    // N servers probing a handful of stand-ins would measure the stand-ins.
    KUBEBYON_HAPROXY_HEALTH_CHECKS: 'false',
    KUBEBYON_RESYNC_INTERVAL_MS: '0',
    KUBEBYON_WEBHOOK_BODY_LIMIT_BYTES: String(32 * 1024 * 1024),
    KUBEBYON_WAIT_TIMEOUT_MS: '600000',
    KUBEBYON_SHUTDOWN_GRACE_MS: '60000',
  };
}

/**
 * `node dist/cli/main.js serve` as its own process, configured by `env` only. Resolves once it is ready.
 * `BENCH_SERVICE_DIR` runs another checkout's build instead (a release before a change, built there), so
 * that the same bench measures both.
 */
export async function startService(env: Record<string, string>, secret: string): Promise<BenchService> {
  // A pass over thousands of clusters may hold readiness, and a graceful stop, for a while.
  const service = await startServiceProcess(env, secret, {
    until: 'readyz',
    startTimeoutMs: 300_000,
    stopGraceMs: 60_000,
    // BENCH_DUMP keeps more: a debug log of a burst is tens of megabytes.
    keepOutputChars: process.env.BENCH_DUMP ? 64_000_000 : 200_000,
    ...(process.env.BENCH_SERVICE_DIR
      ? { cli: join(resolve(process.env.BENCH_SERVICE_DIR), 'dist/cli/main.js') }
      : {}),
  });
  const { url, pid } = service;

  const call = (method: string, path: string, body?: unknown, sent?: (at: bigint) => void) =>
    new Promise<{ status: number; body: string }>((resolve, reject) => {
      const raw = body === undefined ? Buffer.alloc(0) : Buffer.from(JSON.stringify(body));
      const timestamp = String(Math.floor(Date.now() / 1000));
      const req = request(
        `${url}${path}`,
        {
          method,
          agent: false,
          headers: {
            'content-type': 'application/json',
            'content-length': raw.length,
            'x-kubebyon-timestamp': timestamp,
            'x-kubebyon-signature': sign(secret, timestamp, method, path, raw),
          },
        },
        (res) => {
          let text = '';
          res.setEncoding('utf8');
          res.on('data', (c: string) => {
            text += c;
          });
          res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text }));
          res.on('error', reject);
        },
      );
      req.on('error', reject);
      if (sent) req.once('socket', (socket) => stampFlush(socket, sent));
      req.end(raw);
    });

  /** The time of the socket's first write, read just before it is made: the request going out. */
  const stampFlush = (socket: Socket, sent: (at: bigint) => void) => {
    const write = socket.write;
    socket.write = function (this: Socket, ...args: Parameters<Socket['write']>) {
      socket.write = write;
      sent(process.hrtime.bigint());
      return write.apply(this, args);
    } as Socket['write'];
  };

  const metrics = async () => {
    const text = await (await fetch(`${url}/metrics`)).text();
    const values = new Map<string, number>();
    for (const line of text.split('\n')) {
      if (line.startsWith('#') || line === '') continue;
      const at = line.lastIndexOf(' ');
      values.set(line.slice(0, at), Number(line.slice(at + 1)));
    }
    return values;
  };

  const resources = (): Resources => {
    const status = readFileSync(`/proc/${pid}/status`, 'utf8');
    const kb = (key: string) => Number(new RegExp(`^${key}:\\s+(\\d+)`, 'm').exec(status)?.[1] ?? 0);
    // utime and stime are fields 14 and 15, after the command name in parentheses.
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    const ticks = Number(fields[11]) + Number(fields[12]);
    return { rssMb: kb('VmRSS') / 1024, peakRssMb: kb('VmHWM') / 1024, cpuSeconds: ticks / 100 };
  };

  // Onto the process itself: a spread would freeze its `exited` getter.
  return Object.assign(service, { call, metrics, resources });
}
