#!/usr/bin/env node
import { renderCommand } from './render.js';

const usage = `usage: kubebyon-haproxy-adapter render <clusters.json>

  render   validate clusters and print the plan for an HAProxy without our objects (dry run)`;

function main(argv: string[]): number {
  const [command, ...args] = argv;
  if (command === 'render' && args.length === 1 && args[0]) return renderCommand(args[0], process.env);
  console.error(usage);
  return command === undefined || command === '--help' || command === '-h' ? 0 : 1;
}

process.exitCode = main(process.argv.slice(2));
