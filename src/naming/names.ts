/**
 * HAProxy object names: the charset HAProxy allows in proxy and server names, the longest name the service
 * writes or accepts, and the names it gives clusters. Every check of a name (configuration, rendering, the
 * requests and files written) goes by these.
 */

/** The characters HAProxy allows in a proxy or server name (as a regular-expression class). */
export const NAME_CHARS = 'A-Za-z0-9_.:-';
/**
 * HAProxy sets no length of its own: this bounds what is written, with room for every generated name (the
 * longest prefix and a backend's slug and hash).
 */
export const NAME_MAX = 127;
/** What a valid name is, for error messages. */
export const NAME_RULE = `1-${NAME_MAX} of A-Z a-z 0-9 _ . : -`;
const NAME = new RegExp(`^[${NAME_CHARS}]{1,${NAME_MAX}}$`);

export function isHaproxyName(name: string): boolean {
  return NAME.test(name);
}

/** The prefix of every proxy the service names (the SNI frontend's slots): `kubebyon_` unless set. */
export const DEFAULT_PREFIX = 'kubebyon_';
export const PREFIX_MAX = 24;
const PREFIX = new RegExp(`^[a-z][a-z0-9_]{0,${PREFIX_MAX - 1}}$`);
/** What a valid prefix is, for error messages. */
export const PREFIX_RULE = `a lower-case letter then up to ${PREFIX_MAX - 1} of a-z 0-9 _`;

export function validatePrefix(prefix: string): boolean {
  return PREFIX.test(prefix);
}

/** Server names inside one backend are slots (`srv1`, `srv2`, ...) so that an address change is an update. */
export function serverSlotName(slot: number): string {
  return `srv${slot}`;
}

export function serverSlotNumber(name: string): number | undefined {
  const match = /^srv([1-9][0-9]{0,5})$/.exec(name);
  return match ? Number(match[1]) : undefined;
}

/**
 * Slot backends (map routing) carry no cluster in their name: `<prefix>slot_00001`. A cluster's backend name
 * ends in 12 hex digits, a slot's in at least 5 decimal ones, so the two never collide.
 */
export function slotPrefixFor(prefix = DEFAULT_PREFIX): string {
  return `${prefix}slot_`;
}

export function slotName(slotPrefix: string, n: number): string {
  return `${slotPrefix}${String(n).padStart(5, '0')}`;
}

/** The slot number of `name` under `slotPrefix`, or undefined when it is no slot of that prefix. */
export function slotNumber(slotPrefix: string, name: string): number | undefined {
  if (!name.startsWith(slotPrefix)) return undefined;
  const digits = name.slice(slotPrefix.length);
  return /^[0-9]{5,7}$/.test(digits) && Number(digits) > 0 ? Number(digits) : undefined;
}

/** The SNI map's name for an owner (a file name: one map per owner, beside its other files). */
export function sniMapNameFor(ownerId: string): string {
  return `${ownerId}.sni.map`;
}

/** The allow map's name for an owner (authorized networks, `src/haproxy/edge.ts`), beside its SNI map. */
export function allowMapNameFor(ownerId: string): string {
  return `${ownerId}.allow.map`;
}

/** The backend holding the refusals table (`src/haproxy/edge.ts`): one per prefix, so one per owner. */
export function refusalsBackendFor(prefix = DEFAULT_PREFIX): string {
  return `${prefix}refusals`;
}
