/** What the stock-HAProxy provider needs to know; `config/env.ts` maps KUBEBYON_HAPROXY_* onto it. */
export interface StockHaproxyConfig {
  /** The one `-f` file the service owns and replaces on every change. */
  ownedFile: string;
  /** The operator's files HAProxy loads before the owned file, for `haproxy -c`. */
  checkFiles: string[];
  /** The master CLI's socket: reloads and runtime commands go through it. */
  masterSocket: string;
  /** The `haproxy` binary that checks a candidate file. */
  haproxyBin: string;
  /** Longest a check or a reload may take. */
  reloadTimeoutMs: number;
}
