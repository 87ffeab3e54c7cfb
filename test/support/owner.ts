import type { RawState, Tags } from '../../src/haproxy/model.js';
import { Registry } from '../../src/registry/registry.js';

/** The default owner, as every install before owner ids had it: what most tests and benchmarks run as. */
export const registry = new Registry();
export const ownerTags = (cluster?: string): Tags => registry.tags(cluster);
export const isOwned = (tags: Tags): boolean => registry.owns(tags);
export const interpret = (raw: RawState) => registry.interpret(raw);
