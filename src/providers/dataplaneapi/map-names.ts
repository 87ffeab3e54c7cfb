import { basename } from 'node:path';
import { TerminalError } from '../../model/errors.js';

/**
 * Map routing in the Data Plane API's terms (`use_backend %[req.ssl_sni,lower,map(<file>)]` and the map file in
 * the API's storage). Checked on v3.0.23, v3.2.15 and v3.4.0 (`test/fixtures/dataplaneapi/versions.md`):
 * - the `use_backend` is a backend switching rule whose `name` is the whole `%[...]` expression and which has
 *   no `cond`; it round-trips as written through `full_section` objects and the raw file;
 * - the storage renames a map on upload: every `.` of the name before `.map` becomes `_`
 *   (`kubebyon-haproxy-adapter.sni.map` is stored as `kubebyon-haproxy-adapter_sni.map`); the runtime map
 *   endpoints take that stored name. The service's name for the map (`RawFrontend.sniMap`) is the logical
 *   one: `MapNames` translates both ways for the names it has been told.
 */
const MAP_RULE = /^%\[req\.ssl_sni,lower,map\(([^()\s]+)\)\]$/;

/** The name the API's storage gives a map uploaded as `name`. */
export function storageName(name: string): string {
  const base = name.endsWith('.map') ? name.slice(0, -4) : name;
  return `${base.replace(/[^A-Za-z0-9_-]/g, '_')}.map`;
}

/** The switching rule's `name` that routes by the map in `file`. */
export function mapRuleName(file: string): string {
  if (!/^\/[A-Za-z0-9_./-]+$/.test(file) || file.includes('..'))
    throw new TerminalError(`refusing to send the map path ${JSON.stringify(file)}`);
  return `%[req.ssl_sni,lower,map(${file})]`;
}

/** The map file a switching rule routes by, when it is the map rule (no condition); else undefined. */
export function mapRuleFile(rule: { name?: string; cond?: string }): string | undefined {
  if (rule.cond !== undefined && rule.cond !== '') return undefined;
  return MAP_RULE.exec(rule.name ?? '')?.[1];
}

/** Logical map names (as plans name them) by the name the API stores them under. */
export class MapNames {
  private readonly byStorage = new Map<string, string>();

  constructor(names: readonly string[] = []) {
    for (const n of names) this.learn(n);
  }

  learn(name: string): void {
    this.byStorage.set(storageName(name), name);
  }

  /** The logical name of the map in `file` (its stored name when no logical name is known). */
  logical(file: string): string {
    const stored = basename(file);
    return this.byStorage.get(stored) ?? stored;
  }
}
