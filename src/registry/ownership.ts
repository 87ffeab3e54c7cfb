import type {
  BackendState,
  FrontendState,
  HaproxyState,
  RawBackend,
  RawFrontend,
  RawState,
  ServerState,
  Tags,
} from '../haproxy/model.js';

/**
 * The registry: the one place that decides which HAProxy objects the service owns, from the tags providers
 * store with each object (external-dns keeps the same split between `provider/` and `registry/`). Pure.
 */
export const OWNER = 'kubebyon-haproxy-adapter';
export const OWNER_TAG = 'owner';
export const CLUSTER_TAG = 'cluster';

/** Tags a provider stores with every object it creates for a plan; backends also name their cluster. */
export function ownerTags(cluster?: string): Tags {
  return cluster === undefined ? { [OWNER_TAG]: OWNER } : { [OWNER_TAG]: OWNER, [CLUSTER_TAG]: cluster };
}

export function isOwned(tags: Tags): boolean {
  return tags[OWNER_TAG] === OWNER;
}

/** Reads ownership off raw objects: what the planner may change, and which cluster each backend serves. */
export function interpret(raw: RawState): HaproxyState {
  return { frontends: raw.frontends.map(frontendState), backends: raw.backends.map(backendState) };
}

function frontendState(f: RawFrontend): FrontendState {
  const { tags, rules, ...rest } = f;
  return {
    ...rest,
    owned: isOwned(tags),
    rules: rules.map((r) => ({ backend: r.backend, host: r.host, owned: isOwned(r.tags) })),
  };
}

function backendState(b: RawBackend): BackendState {
  const owned = isOwned(b.tags);
  const servers: ServerState[] = b.servers.map(({ tags, ...s }) => ({ ...s, owned: owned && isOwned(tags) }));
  const cluster = owned ? b.tags[CLUSTER_TAG] : undefined;
  return {
    name: b.name,
    owned,
    ...(cluster !== undefined ? { cluster } : {}),
    balance: b.balance,
    servers,
  };
}
