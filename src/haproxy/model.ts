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
  tags: Tags;
}

/** What a provider reads from HAProxy, before ownership is decided. */
export interface RawState {
  frontends: RawFrontend[];
  backends: RawBackend[];
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
}

/** What is in HAProxy now: owned and foreign objects alike. */
export interface HaproxyState {
  frontends: FrontendState[];
  backends: BackendState[];
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
  /** In evaluation order. */
  rules: Array<{ backend: string; host: string }>;
}

/** What the service wants to own in HAProxy: one SNI frontend and one backend per route. */
export interface DesiredConfig {
  frontend: DesiredFrontend;
  backends: DesiredBackend[];
}
