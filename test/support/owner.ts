import type { RawFrontend, RawState, Tags } from '../../src/haproxy/model.js';
import { Registry } from '../../src/registry/registry.js';

/** The default owner, as every install before owner ids had it: what most tests and benchmarks run as. */
export const registry = new Registry();
export const ownerTags = (cluster?: string): Tags => registry.tags(cluster);
export const isOwned = (tags: Tags): boolean => registry.owns(tags);
export const interpret = (raw: RawState) => registry.interpret(raw);

/** Our SNI frontend as a provider reads it, with one owned rule; `over` changes any field. */
export const ownFrontend = (over: Partial<RawFrontend> = {}): RawFrontend => ({
  name: 'kubebyon_sni',
  bind: { address: '*', port: 443 },
  inspectDelayMs: 5000,
  acceptsTlsHello: true,
  defaultBackend: null,
  rules: [{ backend: 'kubebyon_a_0123456789ab', host: 'a.example.com', tags: ownerTags() }],
  tags: ownerTags(),
  ...over,
});

/** The hosts a state routes by its SNI map, sorted. */
export const routedHosts = (state: RawState): string[] => [...(state.maps?.[0]?.entries.keys() ?? [])].sort();
