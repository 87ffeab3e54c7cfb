/**
 * The slice of HAProxy's configuration this service reasons about, independent of how it is read or written.
 * Providers read and write `Raw*` objects with their tags; the registry (`src/registry/ownership.ts`) turns
 * tags into `owned` and `cluster`, and the planner only ever changes or removes objects whose `owned` is true.
 */

/** Key/value tags stored with an object (Data Plane API `metadata`, or a comment in an owned file). */
export type Tags = Readonly<Record<string, string>>;

/**
 * Who writes: the tags to store with what is created, and whether tags read back are this owner's. Only the
 * registry (`src/registry/registry.ts`) implements it; providers use it to tag what they write and to tell
 * their own parts of a frontend (bind, tcp rules) from parts another tool added.
 */
export interface Owner {
  readonly id: string;
  tags(cluster?: string): Tags;
  owns(tags: Tags): boolean;
}

export interface RawServer {
  name: string;
  address: string;
  port: number;
  check: boolean;
  tags: Tags;
}

export interface RawBackend {
  name: string;
  balance: string;
  servers: RawServer[];
  tags: Tags;
}

export interface RawRule {
  backend: string;
  host: string;
  tags: Tags;
}

export interface RawFrontend {
  name: string;
  bind: Bind | null;
  inspectDelayMs: number | null;
  acceptsTlsHello: boolean;
  defaultBackend: string | null;
  rules: RawRule[];
  /**
   * The SNI map the frontend routes by after its rules (`use_backend %[req.ssl_sni,lower,map(<file>)]`), by
   * the map's name (the file's base name; each provider knows its directory). Absent: no map routing.
   */
  sniMap?: string | null;
  tags: Tags;
}

/**
 * An SNI map as HAProxy runs it: lower-case host -> backend. A map is owned with the owned frontend that
 * routes by it (the file is ours; its entries carry no tags of their own).
 */
export interface RawMap {
  /** The map's name, as `RawFrontend.sniMap` gives it. */
  name: string;
  /**
   * Host -> backend, read only like every object of a state: a read's plain `Map`, or what
   * `applyOperations` made of one (a `CowMap`, sharing the entries it did not change).
   */
  entries: ReadonlyMap<string, string>;
}

/** What a provider reads from HAProxy, before ownership is decided. */
export interface RawState {
  frontends: RawFrontend[];
  backends: RawBackend[];
  /** The SNI maps owned frontends route by (absent: none). */
  maps?: RawMap[];
}

/**
 * A deep copy of `state` that is a state again: `structuredClone` alone would turn map entries that
 * `applyOperations` made (a `CowMap`) into a plain object; here they come back as a plain `Map`.
 */
export function cloneRawState(state: RawState): RawState {
  const { maps, ...rest } = state;
  const copy: RawState = structuredClone(rest);
  if (maps) copy.maps = maps.map((m) => ({ name: m.name, entries: new Map(m.entries) }));
  return copy;
}

export type BalanceAlgorithm = 'leastconn' | 'roundrobin' | 'source';

export interface Bind {
  address: string;
  port: number;
}

export interface ServerState {
  name: string;
  address: string;
  port: number;
  check: boolean;
  owned: boolean;
}

export interface BackendState {
  name: string;
  owned: boolean;
  /** The cluster id recorded in the ownership tag (owned backends only). */
  cluster?: string;
  balance: string;
  servers: ServerState[];
}

/** `use_backend <backend> if { req.ssl_sni -i <host> }` */
export interface SwitchingRule {
  backend: string;
  host: string;
  owned: boolean;
}

export interface FrontendState {
  name: string;
  owned: boolean;
  bind: Bind | null;
  /** `tcp-request inspect-delay`, and whether `tcp-request content accept if { req.ssl_hello_type 1 }` is set. */
  inspectDelayMs: number | null;
  acceptsTlsHello: boolean;
  defaultBackend: string | null;
  rules: SwitchingRule[];
  sniMap?: string | null;
}

/** What is in HAProxy now: owned and foreign objects alike. */
export interface HaproxyState {
  frontends: FrontendState[];
  backends: BackendState[];
  /** The SNI maps of owned frontends, as HAProxy runs them. */
  maps?: RawMap[];
}

export interface DesiredServer {
  address: string;
  port: number;
  check: boolean;
}

export interface DesiredBackend {
  name: string;
  cluster: string;
  balance: BalanceAlgorithm;
  servers: DesiredServer[];
}

export interface DesiredFrontend {
  name: string;
  bind: Bind;
  inspectDelayMs: number;
  defaultBackend: string | null;
  /** The SNI map the frontend routes by (map routing), or null/absent (one rule per route). */
  sniMap?: string | null;
  /** In evaluation order. */
  rules: Array<{ backend: string; host: string }>;
}

/** One route in map routing: the host, its cluster, and the servers of whichever slot serves it. */
export interface DesiredRoute {
  host: string;
  cluster: string;
  servers: DesiredServer[];
}

/**
 * Map routing (the default): hosts are keys of one SNI map whose values are pre-created, empty "slot"
 * backends (`<prefix>slot_NNNNN`); a route takes a free slot, so adding, moving or deleting a route is
 * runtime commands only, and only growing the pool reloads.
 */
export interface DesiredRouting {
  map: string;
  /** Slot backend names are `<slotPrefix><5+ digits>`. */
  slotPrefix: string;
  balance: BalanceAlgorithm;
  /** The pool never has fewer slots than this. */
  minSlots: number;
  /** By host. */
  routes: DesiredRoute[];
}

/**
 * What the service wants to own in HAProxy: one SNI frontend and either one backend per route (`backends`,
 * with a rule each) or a map and a pool of slot backends (`routing`).
 */
export interface DesiredConfig {
  frontend: DesiredFrontend;
  backends: DesiredBackend[];
  routing?: DesiredRouting;
}
