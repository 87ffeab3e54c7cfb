import { dirname } from 'node:path';
import pino, { type Logger } from 'pino';
import type { Config } from './config/env.js';
import type { Metrics } from './metrics/metrics.js';
import { createProvider } from './providers/index.js';
import type { Provider } from './providers/provider.js';
import { OwnedProvider } from './registry/owned-provider.js';
import { Registry } from './registry/registry.js';
import type { KubernetesTopology } from './topology/kubernetes.js';
import { StaticTopology, type Topology } from './topology/topology.js';

/**
 * How a configuration becomes a logger, a topology and a provider: one wiring for `serve` and for the
 * passes the command line runs, so that both talk to the same HAProxy and Kubernetes in the same way.
 */

/** JSON logs on standard output, or on the file descriptor given (the command line logs to stderr). */
export function createLogger(config: Pick<Config, 'logLevel'>, fd?: number): Logger {
  // Secrets never reach the log: credentials are only in headers and config, both redacted here.
  const options: pino.LoggerOptions = {
    level: config.logLevel,
    base: { service: 'kubebyon-haproxy-adapter' },
    redact: [
      'req.headers.authorization',
      'req.headers["x-kubebyon-signature"]',
      'config.webhook.secret',
      'config.provider.password',
    ],
  };
  return fd === undefined ? pino(options) : pino(options, pino.destination({ fd, sync: true }));
}

export interface WiringDeps {
  logger: Logger;
  metrics: Metrics;
  /** The environment the configuration came from: Kubernetes credentials are looked up in it too. */
  env?: NodeJS.ProcessEnv;
}

/**
 * The topology the configuration names. A Kubernetes one is returned unstarted (as `kube` too, for its
 * start, stop and health); `onChange` hears of changes that matter to routing. The Kubernetes client is
 * loaded only here, when the topology needs it: a static setup never holds it in memory.
 */
export async function createTopology(
  config: Config,
  onChange: (reason: string) => void,
  deps: WiringDeps,
): Promise<{ topology: Topology; kube: KubernetesTopology | undefined }> {
  if (config.topology.kind !== 'kubernetes') {
    return { topology: new StaticTopology(config.topology.nodeAddresses), kube: undefined };
  }
  const { KubernetesTopology, loadKubeConfig } = await import('./topology/kubernetes.js');
  const kube = new KubernetesTopology(
    loadKubeConfig(deps.env),
    { addressType: config.haproxy.nodeAddressType, excludeNotReady: config.topology.excludeNotReady },
    onChange,
    deps.metrics,
    deps.logger,
  );
  return { topology: kube, kube };
}

/**
 * The provider the configuration names (or the one `given`, for tests), its traffic counted in `metrics`,
 * behind the registry of the configured owner id: no plan reaches a provider unchecked. Only the service
 * keeps the provider's files beside the state file (`keepsFiles`): a pass run by hand beside a running
 * service must not take the service's open transactions for leftovers of its own and drop them.
 */
export async function createConfiguredProvider(
  config: Config,
  deps: WiringDeps & {
    keepsFiles: boolean;
    given?: Provider;
    /** Where the provider keeps its files, when not beside the state file (one folder per instance). */
    stateDir?: string;
    /** Asked before each apply (leader election): a reason refuses the plan. */
    fence?: () => string | undefined;
  },
): Promise<OwnedProvider> {
  const registry = new Registry(config.ownerId);
  if (deps.given) return new OwnedProvider(deps.given, registry, deps.fence);
  const label = { provider: config.provider.kind };
  const provider = await createProvider(config.provider, {
    logger: deps.logger,
    owner: registry,
    ...(deps.keepsFiles ? { stateDir: deps.stateDir ?? dirname(config.stateFile) } : {}),
    persistDelayMs: config.persistDelayMs,
    traffic: {
      request: () => deps.metrics.providerRequests.inc(label),
      bytes: (direction, n) => deps.metrics.providerBytes.inc({ ...label, direction }, n),
    },
  });
  return new OwnedProvider(provider, registry, deps.fence);
}
