import type { Logger } from 'pino';
import type { ClusterRecord } from '../model/cluster.js';
import { compareStrings } from '../routes/route.js';
import {
  type CachedRoute,
  objectName,
  olderVersion,
  parseRoute,
  type RawRoute,
  type RouteSpec,
  sameRecord,
  toRecord,
} from './kube-route.js';

/** Names deleted here whose DELETED event has not come yet (bounded; they only guard against old events). */
const MAX_GONE = 4096;

/** Where a version comes from: this replica's own write (its answer), or what the API showed (watch, reads). */
export type Source = 'own' | 'observed';

/**
 * The ClusterRoutes as this replica knows them, by object name, fed by the watch and by the answers to its
 * own writes. Never goes back: a version older than the one held (an event late behind a write's answer)
 * is dropped. Listeners hear of clusters whose record another replica changed (not of status-only updates,
 * nor of this replica's own writes: their caller knows).
 */
export class RouteCache {
  private readonly routes = new Map<string, CachedRoute>();
  /** resourceVersion at which this replica deleted an object: an event at or before it is old news. */
  private readonly gone = new Map<string, string>();
  private sorted: ClusterRecord[] | undefined;
  private readonly listeners: Array<(names: string[]) => void> = [];

  constructor(private readonly logger: Logger) {}

  /** The object cached under an object name (tombstones included). */
  route(name: string): CachedRoute | undefined {
    return this.routes.get(name);
  }

  all(): CachedRoute[] {
    return [...this.routes.values()];
  }

  /** The cluster of that name, unless absent or a tombstone. */
  get(cluster: string): ClusterRecord | undefined {
    const route = this.routes.get(objectName(cluster));
    return route && route.spec.cluster === cluster ? toRecord(route.spec) : undefined;
  }

  /** Every cluster (no tombstones), sorted by name. */
  list(): ClusterRecord[] {
    this.sorted ??= [...this.routes.values()]
      .map((r) => toRecord(r.spec))
      .filter((r): r is ClusterRecord => r !== undefined)
      .sort((a, b) => compareStrings(a.name, b.name));
    return this.sorted.slice();
  }

  onChange(listener: (names: string[]) => void): void {
    this.listeners.push(listener);
  }

  /** Takes an object version, unless the cache already holds it or a later one. */
  take(raw: RawRoute, source: Source): void {
    const name = raw.metadata?.name ?? '';
    const version = raw.metadata?.resourceVersion ?? '';
    const cached = this.routes.get(name);
    const floor = cached?.resourceVersion ?? this.gone.get(name);
    if (floor !== undefined && (version === floor || olderVersion(version, floor))) return;
    this.gone.delete(name);
    const parsed = parseRoute(raw);
    if ('problem' in parsed) {
      this.logger.warn({ object: name, problem: parsed.problem }, 'ignoring a ClusterRoute');
      if (cached) this.drop(name, version, source);
      return;
    }
    this.routes.set(name, parsed.route);
    this.changed(cached?.spec, parsed.route.spec, source);
  }

  /**
   * An object deleted at `version` (for a relist: the last version seen): removed unless the cache holds a
   * newer one. A delete of this replica's own is remembered, so that a late event cannot bring it back.
   */
  drop(name: string, version: string, source: Source): void {
    const cached = this.routes.get(name);
    if (source === 'own') {
      this.gone.delete(name);
      this.gone.set(name, version);
      if (this.gone.size > MAX_GONE) this.gone.delete(this.gone.keys().next().value as string);
    } else if (this.gone.has(name) && !olderVersion(version, this.gone.get(name))) this.gone.delete(name);
    if (!cached || olderVersion(version, cached.resourceVersion)) return;
    this.routes.delete(name);
    this.changed(cached.spec, undefined, source);
  }

  private changed(before: RouteSpec | undefined, after: RouteSpec | undefined, source: Source) {
    if (sameRecord(before, after)) return;
    this.sorted = undefined;
    const cluster = after?.cluster ?? before?.cluster;
    if (source === 'own' || cluster === undefined) return;
    for (const listener of this.listeners) {
      try {
        listener([cluster]);
      } catch (err) {
        this.logger.error({ err }, 'a ClusterRoute change listener threw');
      }
    }
  }
}
