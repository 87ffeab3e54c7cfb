import type { Config, ProviderConfig } from '../config/env.js';
import type { InstanceEntry } from '../config/fleet-env.js';
import type { Bind } from '../haproxy/model.js';
import type { InstanceTarget } from './fleet.js';

/** One HAProxy instance and the provider settings that reach it: the shared ones, with its own put in. */
export interface InstanceSpec extends InstanceTarget {
  provider: ProviderConfig;
  /** Where its frontend binds, when not where every instance's does. */
  bind?: Bind;
}

/** The name of the one instance the provider's own settings describe (no list given). */
export const DEFAULT_INSTANCE = 'default';

/** The instances a configuration lists, or the one its provider settings name (`single`). Pure. */
export function listedInstances(config: Pick<Config, 'provider' | 'fleet'>): {
  single: boolean;
  specs: InstanceSpec[];
} {
  const entries = config.fleet.instances;
  if (entries.length === 0 && !config.fleet.discovery)
    return { single: true, specs: [spec(DEFAULT_INSTANCE, config.provider)] };
  return {
    single: false,
    specs: entries.map((e) => ({
      ...spec(e.name, withEntry(config.provider, e)),
      ...(e.bind ? { bind: e.bind } : {}),
    })),
  };
}

/** Pods found by label, each reached through its Data Plane API. Pure. */
export function discoveredInstances(
  provider: ProviderConfig,
  pods: ReadonlyArray<{ name: string; url: string }>,
): InstanceSpec[] {
  return pods.map((pod) => spec(pod.name, withEntry(provider, { name: pod.name, url: pod.url })));
}

function spec(name: string, provider: ProviderConfig): InstanceSpec {
  return { name, key: keyOf(provider), provider };
}

/** What tells one instance from another: a change of it is a new HAProxy to drive. */
function keyOf(provider: ProviderConfig): string {
  switch (provider.kind) {
    case 'dataplaneapi':
      return provider.url;
    case 'haproxy':
      return JSON.stringify([
        provider.masterSocket,
        provider.ownedFile,
        provider.checkFiles,
        provider.haproxyBin,
      ]);
    case 'memory':
      return 'memory';
  }
}

function withEntry(provider: ProviderConfig, entry: InstanceEntry): ProviderConfig {
  switch (provider.kind) {
    case 'dataplaneapi':
      return { ...provider, url: entry.url ?? provider.url };
    case 'haproxy':
      return {
        ...provider,
        masterSocket: entry.masterSocket ?? provider.masterSocket,
        ownedFile: entry.ownedFile ?? provider.ownedFile,
        checkFiles: entry.checkFiles ?? provider.checkFiles,
        haproxyBin: entry.haproxyBin ?? provider.haproxyBin,
      };
    case 'memory':
      return provider;
  }
}
