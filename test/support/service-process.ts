import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { freeLoopbackPort } from './ports.js';
import { type SignedClient, signedClient } from './webhook-client.js';

const REPO = join(import.meta.dirname, '../..');
export const CLI = join(REPO, 'dist/cli/main.js');

export interface ServiceProcess {
  url: string;
  client: SignedClient;
  /** Everything the process wrote (JSON log lines). */
  output(): string;
  /** SIGTERM, then the exit code once it has stopped. */
  stop(): Promise<number | null>;
}

/**
 * The real service: `node dist/cli/main.js serve` (built by the e2e global setup), configured only by
 * `env` (plus PATH and HOME), listening on a free loopback port. Resolves once `/healthz` answers.
 */
export async function startServiceProcess(
  env: Record<string, string>,
  secret: string,
): Promise<ServiceProcess> {
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
  child.stdout?.on('data', (chunk: Buffer) => {
    out += chunk.toString();
  });
  child.stderr?.on('data', (chunk: Buffer) => {
    out += chunk.toString();
  });
  let exitCode: number | null | undefined;
  const exited = new Promise<number | null>((resolve) =>
    child.on('exit', (code) => {
      exitCode = code;
      resolve(code);
    }),
  );
  const url = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 20_000;
  for (;;) {
    if (exitCode !== undefined) throw new Error(`serve exited with ${exitCode}:\n${out}`);
    const up = await fetch(`${url}/healthz`).then(
      (r) => r.ok,
      () => false,
    );
    if (up) break;
    if (Date.now() > deadline) {
      child.kill('SIGKILL');
      throw new Error(`serve did not answer /healthz within 20 s:\n${out}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  return {
    url,
    client: signedClient(url, secret),
    output: () => out,
    async stop() {
      if (exitCode === undefined) child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 30_000);
      const code = await exited;
      clearTimeout(timer);
      return code;
    },
  };
}

/** Polls the service's `/readyz` until it says ready. */
export async function waitReady(service: ServiceProcess, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let last = '';
  while (Date.now() < deadline) {
    const res = await fetch(`${service.url}/readyz`).catch(() => undefined);
    if (res?.ok) return;
    last = res ? await res.text() : 'no answer';
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`service not ready within ${timeoutMs} ms: ${last}\n${service.output().slice(-4000)}`);
}
