import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { request } from 'node:http';
import { join } from 'node:path';
import { sign } from '../../src/webhook/auth.js';
import { freeLoopbackPort } from '../../test/support/ports.js';

const REPO = join(import.meta.dirname, '../..');
const CLI = join(REPO, 'dist/cli/main.js');

export interface Resources {
  /** Resident set size now, and its peak since start (VmHWM), in MB. */
  rssMb: number;
  peakRssMb: number;
  /** User + system CPU time since start, in seconds. */
  cpuSeconds: number;
  /** V8 heap in use (the service's own objects), in MB: the rest of the RSS is code, libraries and slack. */
  heapUsedMb?: number | undefined;
}

export interface ServiceProcess {
  url: string;
  pid: number;
  /** A signed webhook call (HMAC, as kubebyon-api sends it), without a client-side timeout. */
  call(method: string, path: string, body?: unknown): Promise<{ status: number; body: string }>;
  metrics(): Promise<Map<string, number>>;
  resources(): Resources;
  output(): string;
  stop(): Promise<void>;
}

/** `node dist/cli/main.js serve` as its own process, configured by `env` only. Resolves once it is ready. */
export async function startService(env: Record<string, string>, secret: string): Promise<ServiceProcess> {
  if (!existsSync(CLI)) throw new Error(`${CLI} is missing: run npm run build`);
  const port = await freeLoopbackPort();
  const child: ChildProcess = spawn(process.execPath, [CLI, 'serve'], {
    cwd: REPO,
    env: {
      PATH: process.env.PATH ?? '/usr/bin:/bin',
      HOME: process.env.HOME ?? '/root',
      KUBEBYON_LISTEN_ADDR: `127.0.0.1:${port}`,
      KUBEBYON_WEBHOOK_SECRET: secret,
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  const keep = (chunk: Buffer) => {
    out = (out + chunk.toString()).slice(-200_000);
  };
  child.stdout?.on('data', keep);
  child.stderr?.on('data', keep);
  let exited = false;
  const exit = new Promise<void>((resolve) =>
    child.on('exit', () => {
      exited = true;
      resolve();
    }),
  );
  const url = `http://127.0.0.1:${port}`;
  const pid = child.pid ?? 0;

  const call = (method: string, path: string, body?: unknown) =>
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
      req.end(raw);
    });

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

  const deadline = Date.now() + 60_000;
  for (;;) {
    if (exited) throw new Error(`serve exited:\n${out.slice(-4000)}`);
    const ready = await fetch(`${url}/readyz`).then(
      (r) => r.ok,
      () => false,
    );
    if (ready) break;
    if (Date.now() > deadline) {
      child.kill('SIGKILL');
      throw new Error(`serve not ready within 60 s:\n${out.slice(-4000)}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  return {
    url,
    pid,
    call,
    metrics,
    resources,
    output: () => out,
    async stop() {
      if (!exited) child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 60_000);
      await exit;
      clearTimeout(timer);
    },
  };
}
