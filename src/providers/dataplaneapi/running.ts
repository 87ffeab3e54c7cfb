import { ALLOW_VALUE } from '../../haproxy/allow-keys.js';
import type { HaproxyState, RawBackend, RawMap, RawServer, RawState } from '../../haproxy/model.js';
import { keysOfSlotMap, slotAllowMapName } from '../../haproxy/slot-allow.js';
import type { DataplaneClient } from './client.js';
import type { Counter } from './reload.js';
import {
  type RunningServer,
  readRunningEntries,
  readRunningServers,
  readStoredEntries,
} from './runtime-reads.js';

/** What HAProxy runs beside the files, and where the files are behind it. */
export interface Running {
  /** The configuration as read, with servers and map entries as HAProxy runs them. */
  raw: RawState;
  /** Backends whose servers, and maps whose entries, run otherwise than the files say (to be written). */
  drift: { backends: Set<string>; maps: Set<string> };
  /** Servers (`backend/server`) in maintenance: left draining by a delete that waits for their streams. */
  draining: Set<string>;
}

/**
 * `raw` (the files as read) completed with what HAProxy runs: every backend's servers and the SNI maps'
 * entries, through the API's runtime side (servers added at runtime are in the files only once persisted).
 * A server the files do not name (yet) carries the tags and check setting the service last gave it (`known`,
 * the state it last knew running; none after a restart): a read before persistence must not have the files
 * written without them. On HAProxy 2.6 the API's runtime reads answer nothing usable
 * (stats empty, map entries parsed from the master's help text), and every change was written and reloaded:
 * the files are what runs. `stats`: the servers' stats, asked for already (`readServerStats`), else now.
 */
export async function withRunning(
  client: DataplaneClient,
  raw: RawState,
  runtimeServers: boolean,
  known: HaproxyState | undefined,
  signal: AbortSignal,
  counter: Counter,
  stats?: Promise<Map<string, RunningServer[]>>,
): Promise<Running> {
  const sniMaps = [...new Set(raw.frontends.flatMap((f) => (f.sniMap ? [f.sniMap] : [])))];
  const allow = allowMapsOf(raw);
  const names = [...sniMaps, ...allow.flatMap((a) => a.slots.map((s) => s.map))];
  const none: Running['drift'] = { backends: new Set(), maps: new Set() };
  if (names.length === 0) return { raw, drift: none, draining: new Set() };
  if (!runtimeServers) {
    // HAProxy 2.6: what runs is what the files hold; a file the API would not answer cannot be guessed.
    const stored = await inLanes(names, (m) => readStoredEntries(client, m, signal, counter));
    const byName = new Map(
      names.map((name, i) => {
        const entries = stored[i];
        if (!entries) throw new Error(`the Data Plane API did not answer the text of map ${name}`);
        return [name, entries] as const;
      }),
    );
    return { raw: { ...raw, maps: logicalMaps(sniMaps, allow, byName) }, drift: none, draining: new Set() };
  }
  const [running, entries, stored] = await Promise.all([
    readRunningServers(client, signal, counter, raw.backends, stats),
    inLanes(names, (m) => readRunningEntries(client, m, signal, counter)),
    inLanes(names, (m) => readStoredEntries(client, m, signal, counter)),
  ]);
  const drift: Running['drift'] = { backends: new Set(), maps: new Set() };
  const byName = new Map<string, ReadonlyMap<string, string>>();
  names.forEach((name, i) => {
    const runs = entries[i] as Map<string, string>;
    // A file whose text is unknown is never called behind: a repair from a misread would write stale entries.
    const file = stored[i];
    if (file && !sameEntries(runs, file)) drift.maps.add(name);
    byName.set(name, runs);
  });
  const maps = logicalMaps(sniMaps, allow, byName);
  const knownServers = new Map(
    (known?.backends ?? []).flatMap((b) => b.servers.map((s) => [`${b.name}/${s.name}`, s])),
  );
  const draining = new Set<string>();
  const backends = raw.backends.map((b): RawBackend => {
    const list = running.get(b.name);
    // A backend HAProxy does not run (a file not loaded yet): as the files say.
    if (!list) return b;
    for (const s of list) if (s.maint) draining.add(`${b.name}/${s.name}`);
    const inFile = new Map(b.servers.map((s) => [s.name, s]));
    const servers = list.map((s): RawServer => {
      const was = inFile.get(s.name) ?? knownServers.get(`${b.name}/${s.name}`);
      return {
        name: s.name,
        address: s.address,
        port: s.port,
        check: was?.check ?? false,
        tags: was?.tags ?? {},
        ...(s.maint ? { maint: true } : {}),
      };
    });
    // A server in maintenance is draining: it stays out of the files.
    if (key(list.filter((s) => !s.maint)) !== key(b.servers.filter((s) => !isDraining(list, s.name))))
      drift.backends.add(b.name);
    return { ...b, servers };
  });
  return { raw: { ...raw, backends, maps }, drift, draining };
}

/** Each guarded frontend's logical allow map, and the slots that guard by their own map of it. */
function allowMapsOf(raw: RawState): Array<{ name: string; slots: Array<{ slot: string; map: string }> }> {
  const names = [...new Set(raw.frontends.flatMap((f) => (f.edge ? [f.edge.allowMap] : [])))];
  return names.map((name) => ({
    name,
    slots: raw.backends.flatMap((b) =>
      b.allowMap && b.allowMap === slotAllowMapName(name, b.name) ? [{ slot: b.name, map: b.allowMap }] : [],
    ),
  }));
}

/** The SNI maps as read, and each logical allow map made of its slots' maps (`keysOfSlotMap`). */
function logicalMaps(
  sniMaps: readonly string[],
  allow: ReturnType<typeof allowMapsOf>,
  byName: ReadonlyMap<string, ReadonlyMap<string, string>>,
): RawMap[] {
  const maps: RawMap[] = sniMaps.map((name) => ({ name, entries: byName.get(name) ?? new Map() }));
  for (const a of allow) {
    const entries = new Map<string, string>();
    for (const { slot, map } of a.slots)
      for (const key of keysOfSlotMap(slot, byName.get(map) ?? new Map())) entries.set(key, ALLOW_VALUE);
    maps.push({ name: a.name, entries });
  }
  return maps;
}

/** `read` of every name, a few at a time (thousands of slots' maps), answers in the names' order. */
async function inLanes<T>(names: readonly string[], read: (name: string) => Promise<T>): Promise<T[]> {
  const out = new Array<T>(names.length);
  let next = 0;
  const lane = async () => {
    while (next < names.length) {
      const i = next++;
      out[i] = await read(names[i] as string);
    }
  };
  await Promise.all(Array.from({ length: Math.min(LANES, names.length) }, lane));
  return out;
}

/** Reads in flight at once: the client's sockets (`client.ts`). */
const LANES = 4;

function isDraining(list: readonly RunningServer[], name: string): boolean {
  return list.some((s) => s.name === name && s.maint);
}

function key(servers: ReadonlyArray<{ name: string; address: string; port: number }>): string {
  return servers
    .map((s) => `${s.name}|${s.address}|${s.port}`)
    .sort()
    .join(',');
}

function sameEntries(a: ReadonlyMap<string, string>, b: ReadonlyMap<string, string>): boolean {
  if (a.size !== b.size) return false;
  for (const [k, v] of a) if (b.get(k) !== v) return false;
  return true;
}
