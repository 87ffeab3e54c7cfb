import type { Tags } from '../../haproxy/model.js';
import { TerminalError } from '../../model/errors.js';
import { OWNER_TAG, TAG_KEY, TAG_VALUE } from '../../registry/registry.js';
import type { Schemas, SchemasV3_0 } from './client.js';

/**
 * Where the service's ownership tags live in the Data Plane API's objects, and how they are written (pure).
 * The registry decides what the tags mean; this only stores and reads them.
 *
 * - `metadata` (v3.2+): `{"owner": {"value": "<id>"}}` on every object, which the API keeps as a JSON
 *   comment on its line.
 * - `description` (v3.0, v3.1: no `metadata` on frontends, backends, binds or rules): frontends and backends
 *   carry the tags in HAProxy's own `description` keyword, as `kubebyon owner=<id> cluster=<c>` (keys and
 *   values as `TAG_KEY`/`TAG_VALUE`, so nothing needs escaping in haproxy.cfg); servers keep `metadata` where
 *   the version has it on servers (v3.0.23 does). Binds and rules carry nothing and are known by shape
 *   (`config-text.ts`).
 */
export type Metadata = NonNullable<Schemas['backend_base']['metadata']>;
/** Where v3.0's document lets frontends and backends hold text of ours. */
type Description = NonNullable<SchemasV3_0['frontend_base']['description']> &
  NonNullable<SchemasV3_0['backend_base']['description']>;

/** The first word of a description that holds tags. */
export const DESCRIPTION_WORD = 'kubebyon';

function refuse(what: string): never {
  throw new TerminalError(`refusing to send ${what} to the Data Plane API`);
}

export function checkedTags(tags: Tags): Tags {
  for (const [k, v] of Object.entries(tags)) {
    if (!TAG_KEY.test(k) || !TAG_VALUE.test(v)) refuse(`tag ${k}=${JSON.stringify(v)}`);
  }
  return tags;
}

/** Tags as API metadata: `{"owner": {"value": "..."}}`. */
export function tagsToMetadata(tags: Tags): Metadata {
  const out: Metadata = {};
  for (const [key, value] of Object.entries(tags)) out[key] = { value };
  return out;
}

/** API metadata as tags: entries shaped `{value: "<string>"}` only; anything else is not a tag of ours. */
export function metadataToTags(metadata: unknown): Tags {
  const tags: Record<string, string> = {};
  if (!metadata || typeof metadata !== 'object') return tags;
  for (const [key, entry] of Object.entries(metadata as Record<string, unknown>)) {
    const value = entry && typeof entry === 'object' ? (entry as { value?: unknown }).value : undefined;
    if (typeof value === 'string') tags[key] = value;
  }
  return tags;
}

/** `kubebyon owner=<id> cluster=<c>`: the owner first, then the other keys in order. */
export function tagsToDescription(tags: Tags): Description {
  const entries = Object.entries(checkedTags(tags)).sort(([a], [b]) =>
    a === OWNER_TAG ? -1 : b === OWNER_TAG ? 1 : a < b ? -1 : a > b ? 1 : 0,
  );
  if (entries.length === 0) refuse('a description without tags');
  return [DESCRIPTION_WORD, ...entries.map(([k, v]) => `${k}=${v}`)].join(' ');
}

/** The tags a description holds: none unless it is exactly the grammar above (one space between words). */
export function descriptionToTags(description: unknown): Tags {
  if (typeof description !== 'string') return {};
  const [word, ...pairs] = description.split(' ');
  if (word !== DESCRIPTION_WORD || pairs.length === 0) return {};
  const tags: Record<string, string> = {};
  for (const pair of pairs) {
    const at = pair.indexOf('=');
    const key = pair.slice(0, at);
    const value = pair.slice(at + 1);
    if (at < 0 || !TAG_KEY.test(key) || !TAG_VALUE.test(value) || key in tags) return {};
    tags[key] = value;
  }
  return tags;
}
