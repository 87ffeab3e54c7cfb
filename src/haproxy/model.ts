import type { Edge } from './edge.js';

/**
 * The slice of HAProxy's configuration this service reasons about, independent of how it is read or written.
 * Providers read `Raw*` objects with their tags; the registry (`src/registry/registry.ts`) interprets the tags
 * once, into the `*State` objects (the same objects plus `owned` and `cluster`), and everything after it
 * (the planner, `applyOperations`, the providers' writes) works on those. Every object is read-only: a state
 * is never changed in place, so what is derived from one (an index, a rendered section) can be kept with it.
 */

/** Key/value tags stored with an object (Data Plane API `metadata`, a `description`, or a comment in a file). */
export type Tags = Readonly<Record<string, string>>;

/**
 * Who writes: the tags to store with what is created. Only the registry (`src/registry/registry.ts`)
 * implements it, and only it reads tags back for what they mean.
 */
export interface Tagger {
  readonly id: string;
  tags(cluster?: string): Tags;
}

/** A server as the planner names it: what a plan creates, changes or deletes. */
export interface ServerSpec {
  readonly name: string;
  readonly address: string;
  readonly port: number;
  readonly check: boolean;
}

export interface RawServer extends ServerSpec {
  readonly tags: Tags;
  /**
   * In maintenance at runtime (read by the Data Plane API provider): left by a delete that has not ended,
   * or added and never made ready (a process killed between the two requests). It takes no traffic, so a
   * wanted one is planned again (`planServers`).
   */
  readonly maint?: boolean;
}

export interface RawBackend {
  readonly name: string;
  /** `''` for a backend without servers that only holds a table (the refusals, `edge.ts`). */
  readonly balance: string;
  readonly servers: readonly RawServer[];
  readonly tags: Tags;
  /** Its `stick-table` line's arguments, if it has one. */
  readonly table?: string | null;
  /**
   * A slot's guard (authorized networks, `edge.ts`): the name of the slot's own allow map it looks sources up
   * in (`slotAllowMapName`); absent: no guard, or not exactly this release's.
   */
  readonly allowMap?: string;
}

export interface RawRule {
  readonly backend: string;
  readonly host: string;
  readonly tags: Tags;
}

export interface RawFrontend {
  readonly name: string;
  readonly bind: Bind | null;
  readonly inspectDelayMs: number | null;
  readonly acceptsTlsHello: boolean;
  readonly defaultBackend: string | null;
  /** `use_backend <backend> if { req.ssl_sni -i <host> }`, in evaluation order (only foreign, or left by an old install). */
  readonly rules: readonly RawRule[];
  /**
   * The SNI map the frontend routes by after its rules (`use_backend %[req.ssl_sni,lower,map(<file>)]`), by
   * the map's name (the file's base name; each provider knows its directory). Absent: no map routing.
   */
  readonly sniMap?: string | null;
  /** The guard before the slots, as this release writes it (`edge.ts`); absent or null: none, or another's. */
  readonly edge?: Edge | null;
  readonly tags: Tags;
}

/**
 * A map as HAProxy runs it: the SNI map (lower-case host -> backend) or the allow map (`edge.ts`: key ->
 * `1`). A map is owned with the owned frontend that names it (the file is ours; its entries carry no tags).
 */
export interface RawMap {
  /** The map's name, as `RawFrontend.sniMap` (or its edge's `allowMap`) gives it. */
  readonly name: string;
  /** Host -> backend: a read's `Map`, or what `applyOperations` made of one (a `CowMap`, sharing entries). */
  readonly entries: ReadonlyMap<string, string>;
}

/** What a provider reads from HAProxy, before ownership is decided. */
export interface RawState {
  readonly frontends: readonly RawFrontend[];
  readonly backends: readonly RawBackend[];
  /** The maps frontends route and guard by (absent: none). */
  readonly maps?: readonly RawMap[];
}

export type BalanceAlgorithm = 'leastconn' | 'roundrobin' | 'source';

export interface Bind {
  readonly address: string;
  readonly port: number;
  /** `accept-proxy`: the PROXY protocol header gives the client's address (behind a load balancer only). */
  readonly acceptProxy?: boolean;
}

export interface ServerState extends RawServer {
  /** Ours: tagged by us, or untagged in a backend of ours (added at runtime, not yet in the files). */
  readonly owned: boolean;
}

export interface BackendState extends Omit<RawBackend, 'servers'> {
  readonly servers: readonly ServerState[];
  readonly owned: boolean;
  /** The cluster id recorded in the ownership tag (owned per-cluster backends of an old install only). */
  readonly cluster?: string;
}

/** A switching rule as the planner sees it: `use_backend <backend> if { req.ssl_sni -i <host> }`. */
export interface SwitchingRule {
  readonly backend: string;
  readonly host: string;
  readonly owned: boolean;
}

export interface FrontendState extends Omit<RawFrontend, 'rules'> {
  readonly rules: readonly (SwitchingRule & { readonly tags: Tags })[];
  readonly owned: boolean;
}

/** What is in HAProxy now, owned and foreign objects alike, as the registry interpreted it. */
export interface HaproxyState {
  readonly frontends: readonly FrontendState[];
  readonly backends: readonly BackendState[];
  /** The SNI and allow maps of owned frontends, as HAProxy runs them. */
  readonly maps?: readonly RawMap[];
}

export interface DesiredServer {
  readonly address: string;
  readonly port: number;
  readonly check: boolean;
}

export interface DesiredFrontend {
  readonly name: string;
  readonly bind: Bind;
  readonly inspectDelayMs: number;
  readonly defaultBackend: string | null;
  /** The SNI map the frontend routes by. */
  readonly sniMap: string;
  /** The guard; its `allowMap` is the routing's. */
  readonly edge: Edge;
}

/** One route: the host, its cluster, and the servers of whichever slot serves it. */
export interface DesiredRoute {
  readonly host: string;
  readonly cluster: string;
  readonly servers: readonly DesiredServer[];
  /** Authorized networks, canonical; empty: open to all. */
  readonly networks: readonly string[];
}

/**
 * Map routing: hosts are keys of one SNI map whose values are pre-created, empty "slot" backends
 * (`<prefix>slot_NNNNN`); a route takes a free slot, so adding, moving or deleting a route is runtime
 * commands only, and only growing the pool reloads.
 */
export interface DesiredRouting {
  readonly map: string;
  /** Slot backend names are `<slotPrefix><5+ digits>`. */
  readonly slotPrefix: string;
  readonly balance: BalanceAlgorithm;
  /** The pool never has fewer slots than this. */
  readonly minSlots: number;
  /** By host. */
  readonly routes: readonly DesiredRoute[];
  /** The allow map (authorized networks, `edge.ts`), and whether its keys need IPv4 also as mapped IPv6. */
  readonly allowMap: string;
  readonly dualStack: boolean;
}

/** What the service wants to own in HAProxy: one SNI frontend, its map, and a pool of slot backends. */
export interface DesiredConfig {
  readonly frontend: DesiredFrontend;
  readonly routing: DesiredRouting;
}
