#!/usr/bin/env node
import { realpathSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { renderCommand } from './render.js';
import { serveCommand } from './serve.js';
import { type Output, statusCommand } from './status.js';

const usage = `usage: kubebyon-haproxy-adapter <command>

  serve                    run the service, configured by KUBEBYON_* environment variables (see README.md)
  render <clusters.json>   validate clusters and print the plan for an HAProxy without our objects (dry run)
  status [--json]          list the clusters of a running service with their states
                           (KUBEBYON_ADAPTER_URL, default http://127.0.0.1:8080; KUBEBYON_WEBHOOK_SECRET[_FILE])`;

/** Runs one command; resolves with the process exit code. */
export async function main(argv: string[], env: NodeJS.ProcessEnv, io: Output): Promise<number> {
  const [command, ...args] = argv;
  if (command === 'render' && args.length === 1 && args[0]) return renderCommand(args[0], env);
  if (command === 'status') return statusCommand(args, env, io);
  if (command === 'serve' && args.length === 0) return serveCommand(env, io);
  io.err(usage);
  return command === undefined || command === '--help' || command === '-h' ? 0 : 1;
}

// Run only when executed, not when imported by tests.
if (process.argv[1] && realpathSync(process.argv[1]) === fileURLToPath(import.meta.url)) {
  process.exitCode = await main(process.argv.slice(2), process.env, {
    out: (line) => console.log(line),
    err: (line) => console.error(line),
  });
}
