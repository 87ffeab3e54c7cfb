import { createHash } from 'node:crypto';

/**
 * HAProxy object names for clusters.
 *
 * Scheme: `<prefix><slug>_<hash>` where
 *   - prefix is the configured owner prefix (default `kubebyon_`),
 *   - slug is the cluster id lower-cased, every character outside [a-z0-9] replaced by `-`, cut to 32 characters,
 *   - hash is the first 12 hex digits of SHA-256 over the exact cluster id.
 * The slug keeps names readable; the hash makes the mapping injective in practice (two ids that slug alike
 * differ in 48 hash bits). Every character is in HAProxy's allowed set [A-Za-z0-9_.:-] and the name is at
 * most prefix + 46 characters long.
 */
export const DEFAULT_PREFIX = 'kubebyon_';
const SLUG_LENGTH = 32;
const HASH_LENGTH = 12;
const PREFIX = /^[a-z][a-z0-9_]{0,23}$/;

export function validatePrefix(prefix: string): boolean {
  return PREFIX.test(prefix);
}

export function backendNameFor(cluster: string, prefix = DEFAULT_PREFIX): string {
  const slug = cluster
    .toLowerCase()
    .replace(/[^a-z0-9]/g, '-')
    .slice(0, SLUG_LENGTH);
  const hash = createHash('sha256').update(cluster, 'utf8').digest('hex').slice(0, HASH_LENGTH);
  return `${prefix}${slug}_${hash}`;
}

/** Server names inside one backend are slots (`srv1`, `srv2`, ...) so that an address change is an update. */
export function serverSlotName(slot: number): string {
  return `srv${slot}`;
}

export function serverSlotNumber(name: string): number | undefined {
  const match = /^srv([1-9][0-9]{0,5})$/.exec(name);
  return match ? Number(match[1]) : undefined;
}
