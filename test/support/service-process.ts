import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { freeLoopbackPort } from './ports.js';
import { waitFor } from './wait.js';
import { type SignedClient, signedClient } from './webhook-client.js';

const REPO = join(import.meta.dirname, '../..');
export const CLI = join(REPO, 'dist/cli/main.js');

export interface ServiceProcess {
  url: string;
  port: number;
  pid: number;
  client: SignedClient;
  /** What the process wrote (JSON log lines), its last `keepOutputChars` characters. */
  output(): string;
  readonly exited: boolean;
  /** Settles with the exit code once the process has exited, whoever ended it. */
  readonly exit: Promise<number | null>;
  /** SIGKILL: no cleanup of any kind. Resolves once the process is gone. */
  kill9(): Promise<void>;
  /** SIGTERM (graceful), SIGKILL after `stopGraceMs`; the exit code once it has stopped. */
  stop(): Promise<number | null>;
}

export interface ServiceProcessOptions {
  /** The loopback port to listen on (KUBEBYON_LISTEN_ADDR); a free one by default. */
  port?: number;
  /** What to wait for before resolving: `/healthz` answering (default), `/readyz` saying ready, or nothing. */
  until?: 'healthz' | 'readyz' | 'spawned';
  /** How long `until` may take. */
  startTimeoutMs?: number;
  /** How long a graceful stop may take before SIGKILL. */
  stopGraceMs?: number;
  /** How much output to keep: a long run logs a lot. */
  keepOutputChars?: number;
  /** Another build's `dist/cli/main.js` (a bench comparing releases); run from its repository's root. */
  cli?: string;
}

/**
 * The one way tests and benches run the service as it ships: `node dist/cli/main.js serve` (built by the
 * global setup of the suites that need it, test/global-setup.ts), as its own process, configured only by
 * `env` (plus PATH, HOME, the listen address and the secret), on loopback.
 */
export async function startServiceProcess(
  env: Record<string, string>,
  secret: string,
  options: ServiceProcessOptions = {},
): Promise<ServiceProcess> {
  const { until = 'healthz', startTimeoutMs = 30_000, stopGraceMs = 30_000 } = options;
  const keep = options.keepOutputChars ?? 1_000_000;
  const cli = options.cli ?? CLI;
  if (!existsSync(cli)) throw new Error(`${cli} is missing: run npm run build`);
  const port = options.port ?? (await freeLoopbackPort());
  const child = spawn(process.execPath, [cli, 'serve'], {
    cwd: join(cli, '../../..'),
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
  const append = (chunk: Buffer) => {
    out = (out + chunk.toString()).slice(-keep);
  };
  child.stdout?.on('data', append);
  child.stderr?.on('data', append);
  let exited = false;
  const exit = new Promise<number | null>((resolve) =>
    child.on('exit', (code) => {
      exited = true;
      resolve(code);
    }),
  );
  const url = `http://127.0.0.1:${port}`;
  const service: ServiceProcess = {
    url,
    port,
    pid: child.pid ?? 0,
    client: signedClient(url, secret),
    output: () => out,
    get exited() {
      return exited;
    },
    exit,
    async kill9() {
      if (!exited) child.kill('SIGKILL');
      await exit;
    },
    async stop() {
      if (!exited) child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), stopGraceMs);
      const code = await exit;
      clearTimeout(timer);
      return code;
    },
  };
  if (until === 'spawned') return service;
  try {
    await waitFor(
      async () => {
        if (exited) return 'exited';
        const res = await fetch(`${url}/${until}`);
        return res.ok ? 'up' : `${res.status} ${await res.text()}`;
      },
      startTimeoutMs,
      `serve to answer /${until}`,
      { ok: (state) => state === 'up' || state === 'exited', everyMs: 50 },
    );
  } catch (err) {
    await service.kill9();
    // The polls of the wait itself say nothing: what the service logged besides them does.
    const said = out
      .split('\n')
      .filter((l) => !l.includes(`"route":"/${until}"`))
      .join('\n');
    throw new Error(`${(err as Error).message}\n${said.slice(-4000)}`);
  }
  if (exited) throw new Error(`serve exited with ${await exit}:\n${out.slice(-4000)}`);
  return service;
}
