import type { Logger } from 'pino';
import type { Tagger } from '../../haproxy/model.js';
import type { Clock } from '../../timing/clock.js';
import type { ProviderTraffic } from '../provider.js';

/**
 * With the slots in the API's storage: the most runtime requests one plan sends (a new route costs three:
 * add server, ready, map entry). A larger plan (a burst of new clusters) is written to the files and loaded
 * with one reload: each runtime request costs the API about 1 ms of CPU, so a burst of 1000 new routes at
 * 5000 was 2.4 s this way against 6.3 s at runtime (bench/results/zero-reload.md, 2026-12-04).
 */
export const RUNTIME_MAX_REQUESTS = 600;

export interface DataplaneProviderOptions {
  /** The API's root, e.g. `http://127.0.0.1:5555` (`/v3` is added). */
  url: string;
  username: string;
  password: string;
  /** Longest one request may take. */
  timeoutMs: number;
  /** Longest a reload may take. */
  reloadTimeoutMs: number;
  /**
   * Where the slot backends live: `config` (the default), in the configuration file with the rest;
   * `storage`, in files of the API's general storage that HAProxy loads with a second `-f` (`slots.ts`).
   */
  slots?: 'config' | 'storage';
  /** The SNI maps' names as plans give them (the storage renames a map on upload); plans' names are learnt too. */
  sniMaps?: string[];
  /** The owner's allow map (the routing's; default: the owner id's). */
  allowMap?: string;
  /** The ledger of open transactions a release before this one kept: swept at start (`sweep.ts`). */
  ledgerFile?: string;
  /** Servers changed at runtime are written to the files this long after the last change (and at most 1 s after the first). */
  persistDelayMs?: number;
  owner: Tagger;
  logger: Logger;
  traffic?: ProviderTraffic;
  clock?: Clock;
}

/**
 * The Data Plane API provider's settings, which `config/env.ts` maps KUBEBYON_DATAPLANE_* onto: the
 * provider's own options that an operator sets (the rest are wiring).
 */
export type DataplaneConfig = Required<
  Pick<DataplaneProviderOptions, 'url' | 'username' | 'password' | 'timeoutMs' | 'reloadTimeoutMs' | 'slots'>
>;
