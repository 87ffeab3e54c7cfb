#!/usr/bin/env node
import { realpathSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { type ParseArgsConfig, parseArgs } from 'node:util';
import { importStateCommand } from './import-state.js';
import type { Output } from './output.js';
import { applyCommand, type CliDeps, planCommand } from './pass.js';
import { renderCommand } from './render.js';
import { serveCommand } from './serve.js';
import { statusCommand } from './status.js';

/** A command line that cannot be understood (sysexits' EX_USAGE). */
export const EXIT_USAGE = 64;

const PROGRAM = 'kubebyon-haproxy-adapter';

type Options = NonNullable<ParseArgsConfig['options']>;

interface Command {
  usage: string;
  summary: string;
  help: string;
  options: Options;
  /** How many positional arguments the command takes. */
  positionals: [min: number, max: number];
  run(
    positionals: string[],
    values: Record<string, unknown>,
    env: NodeJS.ProcessEnv,
    io: Output,
    deps: CliDeps,
  ): Promise<number>;
}

const json: Options = { json: { type: 'boolean' } };

const COMMANDS: Record<string, Command> = {
  serve: {
    usage: 'serve',
    summary: 'run the service, configured by KUBEBYON_* environment variables',
    help: `Runs the webhook API, the reconcile loop and the provider the configuration names (README.md,
"Configuration"). Logs JSON lines on standard output. SIGTERM or SIGINT stops it gracefully: calls in
flight are answered and their changes applied, within KUBEBYON_SHUTDOWN_GRACE_MS; a second signal ends
it at once.
Exit: 0 after a graceful stop; 1 when the configuration is invalid (every bad variable is named) or the
service cannot start.`,
    options: {},
    positionals: [0, 0],
    run: (_p, _v, env, io) => serveCommand(env, io),
  },
  plan: {
    usage: 'plan [clusters.json] [--json]',
    summary: 'what one pass would change in HAProxy; exit 0 nothing, 2 changes',
    help: `Reads the HAProxy the configuration points at (KUBEBYON_PROVIDER and its variables) and prints the
changes one reconcile pass would make, and each cluster's state after them; changes nothing.
The clusters come from clusters.json, in the format of PUT /v1/clusters
({"clusters": [{"name": ..., "control_plane_host": ..., "public_access_mode": "loadbalancer",
"node_port": ...}]}, checked by the same rules), or without it from the state file (KUBEBYON_STATE_FILE).
  --json   the plan, its operations and the clusters as JSON
Exit: 0 nothing would change; 2 something would; 1 error (configuration, file, HAProxy unreachable).`,
    options: json,
    positionals: [0, 1],
    run: (p, v, env, io, deps) => planCommand(p[0], { json: v.json === true }, env, io, deps),
  },
  apply: {
    usage: 'apply [clusters.json]',
    summary: 'one reconcile pass now, without a running service',
    help: `Runs one reconcile pass (one attempt; read again up to KUBEBYON_RECONCILE_RETRIES times when HAProxy
changes meanwhile) against the HAProxy the configuration points at, for the clusters in clusters.json (the format of PUT /v1/clusters) or in the
state file (KUBEBYON_STATE_FILE), which it reads but never writes. Prints the plan it applied and each
cluster's state. While a service runs against the same HAProxy, change clusters through its webhook
instead: the service would undo a pass made from another list.
Exit: 0 the pass succeeded; 1 it failed (the reason is printed) or the input is invalid.`,
    options: {},
    positionals: [0, 1],
    run: (p, _v, env, io, deps) => applyCommand(p[0], env, io, deps),
  },
  status: {
    usage: 'status [--json]',
    summary: 'clusters of a running service with their states',
    help: `Asks a running service (KUBEBYON_ADAPTER_URL, default http://127.0.0.1:8080) for its clusters,
signed with KUBEBYON_WEBHOOK_SECRET (or _FILE), and prints their states, endpoints and reasons.
  --json   the clusters as JSON
Exit: 0; 1 when the service cannot be reached or refuses the call.`,
    options: json,
    positionals: [0, 0],
    run: (_p, v, env, io) => statusCommand({ json: v.json === true }, env, io),
  },
  render: {
    usage: 'render <clusters-with-endpoints.json>',
    summary: 'validate clusters and print the plan for an HAProxy without our objects',
    help: `A dry run that reaches nothing: validates clusters given with their endpoints
({"clusters": [{"cluster": ..., "host": ..., "endpoints": [{"address": ..., "port": ...}]}]}, see
examples/clusters.json) and prints each one's fate and what the service would create in an HAProxy
that holds none of its objects. Reads the KUBEBYON_HAPROXY_* rendering variables and KUBEBYON_PUBLIC_PORT,
checked like the service checks them.
Exit: 0; 1 when a variable or the file is invalid.`,
    options: {},
    positionals: [1, 1],
    run: (p, _v, env, io) => renderCommand(p[0] ?? '', env, io),
  },
  'import-state': {
    usage: 'import-state <state file>',
    summary: 'copy a state file into ClusterRoute objects, once (KUBEBYON_STATE_STORE=kubernetes)',
    help: `Moves to the Kubernetes store: creates a ClusterRoute in KUBEBYON_KUBERNETES_NAMESPACE (default: the
pod's own namespace, else kubebyon-system) for each cluster of the state file (KUBEBYON_STATE_FILE's format,
its journal included), keeping when each host was claimed, so that the older claim still wins. A cluster
that already has a ClusterRoute (or a recent deletion of one) is left as it is: running it again imports
nothing twice. Reads only the Kubernetes credentials (KUBECONFIG, else the pod's service account, else
~/.kube/config) and the namespace; needs the chart's ClusterRoute CRD installed and rights to the ClusterRoutes
(the chart's ServiceAccount has them). Prints "imported N, skipped M (already there)".
Exit: 0 imported; 1 when the file cannot be read, the CRD is missing, or Kubernetes refuses a write.`,
    options: {},
    positionals: [1, 1],
    run: (p, _v, env, io, deps) => importStateCommand(p[0] ?? '', env, io, deps),
  },
};

function overview(): string {
  const width = Math.max(...Object.values(COMMANDS).map((c) => c.usage.length));
  return [
    `usage: ${PROGRAM} <command> [options]`,
    '',
    ...Object.values(COMMANDS).map((c) => `  ${c.usage.padEnd(width)}  ${c.summary}`),
    '',
    `"${PROGRAM} <command> --help" describes a command. Exit codes: 0 success, 1 error,`,
    `2 (plan) changes pending, ${EXIT_USAGE} a command line that cannot be understood.`,
  ].join('\n');
}

function commandHelp(c: Command): string {
  return `usage: ${PROGRAM} ${c.usage}\n\n${c.help}`;
}

/** Runs one command; resolves with the process exit code. */
export async function main(
  argv: string[],
  env: NodeJS.ProcessEnv,
  io: Output,
  deps: CliDeps = {},
): Promise<number> {
  const [name, ...args] = argv;
  if (name === '--help' || name === '-h' || name === 'help') {
    io.out(overview());
    return 0;
  }
  const command = name !== undefined && Object.hasOwn(COMMANDS, name) ? COMMANDS[name] : undefined;
  if (!command) {
    io.err(name === undefined ? 'a command is required' : `unknown command: ${name}`);
    io.err(overview());
    return EXIT_USAGE;
  }
  let parsed: ReturnType<typeof parseArgs>;
  try {
    parsed = parseArgs({
      args,
      options: { ...command.options, help: { type: 'boolean', short: 'h' } },
      allowPositionals: true,
      strict: true,
    });
  } catch (err) {
    io.err(`${name}: ${(err as Error).message}`);
    io.err(`usage: ${PROGRAM} ${command.usage}`);
    return EXIT_USAGE;
  }
  if (parsed.values.help === true) {
    io.out(commandHelp(command));
    return 0;
  }
  const [min, max] = command.positionals;
  if (parsed.positionals.length < min || parsed.positionals.length > max) {
    io.err(
      parsed.positionals.length > max
        ? `${name}: unexpected argument: ${parsed.positionals[max]}`
        : `${name}: missing argument`,
    );
    io.err(`usage: ${PROGRAM} ${command.usage}`);
    return EXIT_USAGE;
  }
  return command.run(parsed.positionals, parsed.values, env, io, deps);
}

// Run only when executed, not when imported by tests.
if (process.argv[1] && realpathSync(process.argv[1]) === fileURLToPath(import.meta.url)) {
  process.exitCode = await main(process.argv.slice(2), process.env, {
    out: (line) => process.stdout.write(`${line}\n`),
    err: (line) => process.stderr.write(`${line}\n`),
  });
}
