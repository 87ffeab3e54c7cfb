import type { Logger } from 'pino';
import type { Owner } from '../../haproxy/model.js';
import type { ApplyReport, ProviderTraffic } from '../provider.js';
import type { ServerUpdate } from './objects.js';

export interface DataplaneProviderOptions {
  /** The API's root, e.g. `http://127.0.0.1:5555` (`/v3` is added). */
  url: string;
  username: string;
  password: string;
  /** Longest one request may take. */
  timeoutMs: number;
  /** Longest a reload may take (a `force_reload` commit, or following a `Reload-Id`). */
  reloadTimeoutMs: number;
  /** Most server address/port changes applied one by one without a reload; more go into one transaction. */
  runtimeMaxServers: number;
  /**
   * With `slots: 'storage'`: most runtime requests one plan sends (a new route costs three: add server,
   * ready, map entry). A larger plan (a burst of new clusters) is written to the files and loaded with one
   * reload. 0: always at runtime. Default 600.
   */
  runtimeMaxRequests?: number;
  /**
   * Plans that need at least this many writes in a transaction are applied as one edited configuration file
   * instead (`POST /configuration/raw`); more endpoint moves than `runtimeMaxServers` likewise, without a
   * reload (`skip_reload` with the moves as runtime actions). 0 turns the file path off. Default 8.
   */
  rawMinWrites?: number;
  /**
   * `force_reload` (default): the commit reloads HAProxy before it answers, and a failed reload answers 400
   * with the API's view restored. `follow`: commit into the API's reload batching and follow the `Reload-Id`.
   */
  commit?: 'force_reload' | 'follow';
  /**
   * After each apply, open the next transaction ahead at the version it left (default true): opening one
   * costs what a parse of the whole file costs, off the path of the next change. One stays open while idle.
   */
  prepareTransactions?: boolean;
  /** Where the ids of open transactions are kept across a crash; in memory only when absent. */
  ledgerFile?: string;
  /**
   * The SNI maps' names as plans give them (map routing): the API's storage renames a map on upload, and a
   * frontend's map is read back by this name. Names plans use are learnt as well.
   */
  sniMaps?: string[];
  /**
   * Map routing: where the slot backends live. `config` (the default): in the configuration file, with the
   * rest. `storage`: in a file of the API's general storage (`<owner id>_slots.cfg`) that HAProxy loads with
   * a second `-f` (the storage directory): persistence is a file write instead of a push the API parses,
   * and a burst of new routes one reload (`slots-file.ts`).
   */
  slots?: 'config' | 'storage';
  /** Servers added or removed at runtime are written to the file this long after the last change... */
  persistDebounceMs?: number;
  /** ...and at most this long after the first (default 1000). */
  persistMaxDelayMs?: number;
  /** Whose tags what is written carries (the registry's owner). */
  owner: Owner;
  logger: Logger;
  /** Counts every request and its bytes (the service's provider metrics). */
  traffic?: ProviderTraffic;
}

/** The requests one apply has sent so far, for its report. */
export interface Counter {
  requests: number;
}

/** How an apply ended, and the configuration version it left (when the API said). */
export interface Applied {
  reload: ApplyReport['reload'];
  version: number | undefined;
  /**
   * By how many versions the apply's own requests moved the configuration (a commit or a raw push moves it by
   * one, a runtime-path server update by one each): a version further on means someone else wrote too.
   */
  versionBumps: number;
  /** Endpoint moves applied at runtime and written to the file (no reload). */
  moves?: ServerUpdate[];
}
