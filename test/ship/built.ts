import { execFile, spawn } from 'node:child_process';
import { join } from 'node:path';

/** The repository root and the built command line (test/ship/global-setup.ts builds both dist/ and the image). */
export const REPO = join(import.meta.dirname, '../..');
export const CLI = join(REPO, 'dist/cli/main.js');
export const ADAPTER_IMAGE = process.env.KUBEBYON_ADAPTER_IMAGE ?? 'kubebyon/haproxy-adapter:0.1.0';

export interface Ran {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

/** Runs a program to its end (bounded by `timeoutMs`), with `input` on its standard input. */
export function runProgram(
  file: string,
  args: string[],
  opts: { env?: NodeJS.ProcessEnv; input?: string; timeoutMs?: number; cwd?: string } = {},
): Promise<Ran> {
  return new Promise((resolve) => {
    const child = execFile(
      file,
      args,
      {
        env: opts.env ?? process.env,
        cwd: opts.cwd ?? REPO,
        timeout: opts.timeoutMs ?? 60_000,
        maxBuffer: 64 * 1024 * 1024,
      },
      (err, stdout, stderr) => {
        const e = err as (Error & { code?: number | string; signal?: NodeJS.Signals }) | null;
        resolve({
          code: e ? (typeof e.code === 'number' ? e.code : null) : 0,
          signal: e?.signal ?? null,
          stdout,
          stderr,
        });
      },
    );
    if (opts.input !== undefined) child.stdin?.end(opts.input);
    else child.stdin?.end();
  });
}

/** A started process whose output is collected as it comes; `exited` resolves with its exit code. */
export function startProgram(
  file: string,
  args: string[],
  env: NodeJS.ProcessEnv,
  opts: { detached?: boolean } = {},
) {
  const child = spawn(file, args, { env, cwd: REPO, stdio: ['ignore', 'pipe', 'pipe'], ...opts });
  const out = { stdout: '', stderr: '' };
  child.stdout.on('data', (c: Buffer) => {
    out.stdout += c.toString();
  });
  child.stderr.on('data', (c: Buffer) => {
    out.stderr += c.toString();
  });
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.on('exit', (code, signal) => resolve({ code, signal })),
  );
  return { child, out, exited };
}
