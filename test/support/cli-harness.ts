import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import { afterEach, beforeEach } from 'vitest';
import { main } from '../../src/cli/main.js';
import type { CliDeps } from '../../src/cli/pass.js';

/**
 * The command line run in-process, as the unit tests meet it: a fresh folder per test for its input and state
 * files (`dir`), and each run's exit code with what it printed (`lines` on stdout, `err` on stderr).
 */
export function cliHarness(prefix: string) {
  const h = {
    dir: '',
    async run(args: string[], env: NodeJS.ProcessEnv = {}, deps: CliDeps = {}) {
      const lines: string[] = [];
      const err: string[] = [];
      const io = { out: (l: string) => lines.push(l), err: (l: string) => err.push(l) };
      const code = await main(args, env, io, { logger: pino({ level: 'silent' }), ...deps });
      return { code, lines, out: lines.join('\n'), err: err.join('\n') };
    },
    /** Writes `content` (a string as it is, anything else as JSON) to `name` in `dir`; its path. */
    file(name: string, content: unknown): string {
      const path = join(h.dir, name);
      writeFileSync(path, typeof content === 'string' ? content : JSON.stringify(content));
      return path;
    },
  };
  beforeEach(() => {
    h.dir = mkdtempSync(join(tmpdir(), prefix));
  });
  afterEach(() => {
    rmSync(h.dir, { recursive: true, force: true });
  });
  return h;
}
