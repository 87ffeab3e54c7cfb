import type {
  BackendState,
  FrontendState,
  HaproxyState,
  RawBackend,
  RawFrontend,
  RawState,
  ServerState,
  Tagger,
  Tags,
} from '../haproxy/model.js';

/**
 * The registry: the one place that decides which HAProxy objects this service owns, from the tags providers
 * store with each object (external-dns keeps the same split between `provider/` and `registry/`, and its
 * `--txt-owner-id` is our owner id). Pure.
 */
export const OWNER_TAG = 'owner';
export const CLUSTER_TAG = 'cluster';
/** The owner id of every install before owner ids existed: keeping it keeps owning what they made. */
export const DEFAULT_OWNER_ID = 'kubebyon-haproxy-adapter';
/**
 * An owner id reaches `haproxy.cfg` (a tag comment, a section name, API metadata): lower-case letters, digits,
 * `.`, `_` and `-`, starting and ending with a letter or digit, at most 63 characters.
 */
export const OWNER_ID = /^[a-z0-9](?:[a-z0-9._-]{0,61}[a-z0-9])?$/;
/** What a tag may hold wherever a provider stores it (a comment in a file, API metadata): nothing to escape. */
export const TAG_KEY = /^[a-z][a-z0-9_]{0,31}$/;
export const TAG_VALUE = /^[A-Za-z0-9._-]{1,253}$/;

export class InvalidOwnerIdError extends Error {
  override readonly name = 'InvalidOwnerIdError';
}

export class Registry implements Tagger {
  constructor(readonly id: string = DEFAULT_OWNER_ID) {
    if (!OWNER_ID.test(id))
      throw new InvalidOwnerIdError(
        `owner id ${JSON.stringify(id)}: use 1-63 of a-z, 0-9, '.', '_', '-', starting and ending with a letter or digit`,
      );
  }

  /** Tags a provider stores with every object it creates for this owner (with `cluster`, an old install's per-cluster backend). */
  tags(cluster?: string): Tags {
    return cluster === undefined
      ? { [OWNER_TAG]: this.id }
      : { [OWNER_TAG]: this.id, [CLUSTER_TAG]: cluster };
  }

  /** Ours exactly when our owner id is on it: untagged objects and other owners' are foreign. */
  owns(tags: Tags): boolean {
    return tags[OWNER_TAG] === this.id;
  }

  /**
   * Reads ownership off raw objects, once per read: what the planner may change, and which cluster each
   * backend serves. A server without tags of its own belongs to its backend's owner (servers added at
   * runtime carry none until they reach the files); one with another owner's tags is foreign wherever it is.
   */
  interpret(raw: RawState): HaproxyState {
    const frontends = raw.frontends.map((f) => this.frontendState(f));
    // A map is ours with the owned frontend that names it (routes or guards by it); others' maps are not read.
    const ours = new Set<string>();
    for (const f of frontends) {
      if (!f.owned) continue;
      if (f.sniMap) ours.add(f.sniMap);
      if (f.edge) ours.add(f.edge.allowMap);
    }
    const maps = raw.maps?.filter((m) => ours.has(m.name));
    return {
      frontends,
      backends: raw.backends.map((b) => this.backendState(b)),
      ...(maps !== undefined ? { maps } : {}),
    };
  }

  private frontendState(f: RawFrontend): FrontendState {
    return {
      ...f,
      owned: this.owns(f.tags),
      rules: f.rules.map((r) => ({ ...r, owned: this.owns(r.tags) })),
    };
  }

  private backendState(b: RawBackend): BackendState {
    const owned = this.owns(b.tags);
    // Field by field, not by rest and spread: this runs for every server of every backend on each full read.
    const servers: ServerState[] = b.servers.map((s) => ({
      name: s.name,
      address: s.address,
      port: s.port,
      check: s.check,
      tags: s.tags,
      owned: owned && (isUntagged(s.tags) || this.owns(s.tags)),
      ...(s.maint ? { maint: true } : {}),
    }));
    const cluster = owned ? b.tags[CLUSTER_TAG] : undefined;
    return {
      name: b.name,
      balance: b.balance,
      tags: b.tags,
      servers,
      owned,
      ...(cluster !== undefined ? { cluster } : {}),
      ...(b.table ? { table: b.table } : {}),
      ...(b.allowMap ? { allowMap: b.allowMap } : {}),
    };
  }
}

function isUntagged(tags: Tags): boolean {
  for (const _ in tags) return false;
  return true;
}
