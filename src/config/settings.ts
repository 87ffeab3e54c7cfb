/**
 * Every setting the service reads, with its one default (used by `env.ts` and `fleet-env.ts`, and checked
 * against the README's tables by `test/unit/docs.test.ts`), and the group the README lists it in. What a
 * user sets is in the first groups; `tuning` holds the knobs that stay for a symptom the README names.
 */
export type SettingGroup = 'required' | 'service' | 'haproxy' | 'kubernetes' | 'fleet' | 'tuning';

export interface Setting {
  readonly group: SettingGroup;
  /** The value when unset or empty; `''` for none. */
  readonly default: string;
  /** Also read from the file `<NAME>_FILE` names. */
  readonly secret?: true;
}

export const SETTINGS = {
  KUBEBYON_WEBHOOK_SECRET: { group: 'required', default: '', secret: true },

  KUBEBYON_PROVIDER: { group: 'service', default: 'dataplaneapi' },
  KUBEBYON_OWNER_ID: { group: 'service', default: 'kubebyon-haproxy-adapter' },
  KUBEBYON_LISTEN_ADDR: { group: 'service', default: '0.0.0.0:8080' },
  KUBEBYON_STATE_FILE: { group: 'service', default: '/var/lib/kubebyon-haproxy-adapter/clusters.json' },
  KUBEBYON_LOG_LEVEL: { group: 'service', default: 'info' },
  KUBEBYON_WEBHOOK_AUTH: { group: 'service', default: 'hmac' },

  KUBEBYON_HAPROXY_BIND_ADDR: { group: 'haproxy', default: ':443' },
  KUBEBYON_PUBLIC_PORT: { group: 'haproxy', default: '443' },
  KUBEBYON_HAPROXY_DEFAULT_BACKEND: { group: 'haproxy', default: '' },
  KUBEBYON_HAPROXY_FRONTEND_NAME: { group: 'haproxy', default: 'kubebyon_sni' },
  KUBEBYON_HAPROXY_NAME_PREFIX: { group: 'haproxy', default: 'kubebyon_' },
  KUBEBYON_HAPROXY_ACCEPT_PROXY: { group: 'haproxy', default: 'false' },
  KUBEBYON_DATAPLANE_URL: { group: 'haproxy', default: 'http://127.0.0.1:5555' },
  KUBEBYON_DATAPLANE_USERNAME: { group: 'haproxy', default: 'admin' },
  KUBEBYON_DATAPLANE_PASSWORD: { group: 'haproxy', default: '', secret: true },
  KUBEBYON_HAPROXY_OWNED_FILE: { group: 'haproxy', default: '/etc/haproxy/kubebyon.cfg' },
  KUBEBYON_HAPROXY_CHECK_FILES: { group: 'haproxy', default: '/etc/haproxy/haproxy.cfg' },
  KUBEBYON_HAPROXY_MASTER_SOCKET: { group: 'haproxy', default: '/run/haproxy-master.sock' },
  KUBEBYON_HAPROXY_BIN: { group: 'haproxy', default: 'haproxy' },

  KUBEBYON_TOPOLOGY: { group: 'kubernetes', default: 'static' },
  KUBEBYON_STATIC_NODE_ADDRESSES: { group: 'kubernetes', default: '' },
  KUBEBYON_HAPROXY_NODE_ADDRESS_TYPE: { group: 'kubernetes', default: 'internal' },

  KUBEBYON_HAPROXY_INSTANCES: { group: 'fleet', default: '' },
  KUBEBYON_HAPROXY_POD_SELECTOR: { group: 'fleet', default: '' },
  KUBEBYON_HAPROXY_POD_NAMESPACE: { group: 'fleet', default: '' },
  KUBEBYON_DATAPLANE_POD_PORT: { group: 'fleet', default: '5555' },
  KUBEBYON_STATE_STORE: { group: 'fleet', default: 'file' },
  KUBEBYON_KUBERNETES_NAMESPACE: { group: 'fleet', default: '' },
  KUBEBYON_LEADER_ELECTION: { group: 'fleet', default: '' },
  KUBEBYON_LEADER_ELECTION_ID: { group: 'fleet', default: '' },
  KUBEBYON_LEASE_NAME: { group: 'fleet', default: 'kubebyon-haproxy-adapter' },
  KUBEBYON_APPLY: { group: 'fleet', default: 'leader' },

  KUBEBYON_HAPROXY_INSPECT_DELAY_MS: { group: 'tuning', default: '5000' },
  KUBEBYON_HAPROXY_MAXCONN: { group: 'tuning', default: '8000' },
  KUBEBYON_HAPROXY_MAX_CONN_PER_SOURCE: { group: 'tuning', default: '500' },
  KUBEBYON_HAPROXY_MAX_CONN_RATE_PER_SOURCE: { group: 'tuning', default: '1000' },
  KUBEBYON_HAPROXY_SOURCE_TABLE_SIZE: { group: 'tuning', default: '100000' },
  KUBEBYON_HAPROXY_HEALTH_CHECKS: { group: 'tuning', default: 'true' },
  KUBEBYON_PERSIST_DELAY_MS: { group: 'tuning', default: '500' },
  KUBEBYON_RESYNC_INTERVAL_MS: { group: 'tuning', default: '60000' },
  KUBEBYON_WAIT_TIMEOUT_MS: { group: 'tuning', default: '30000' },
  KUBEBYON_SHUTDOWN_GRACE_MS: { group: 'tuning', default: '20000' },
  KUBEBYON_WEBHOOK_REPLAY_WINDOW_SECONDS: { group: 'tuning', default: '300' },
  KUBEBYON_WEBHOOK_BODY_LIMIT_BYTES: { group: 'tuning', default: '1048576' },
  KUBEBYON_KUBERNETES_EXCLUDE_NOT_READY: { group: 'tuning', default: 'true' },
  KUBEBYON_DATAPLANE_TIMEOUT_MS: { group: 'tuning', default: '30000' },
  KUBEBYON_HAPROXY_RELOAD_TIMEOUT_MS: { group: 'tuning', default: '60000' },
  KUBEBYON_DATAPLANE_SLOTS: { group: 'tuning', default: 'config' },
  KUBEBYON_LEASE_DURATION_MS: { group: 'tuning', default: '15000' },
  KUBEBYON_LEASE_RENEW_DEADLINE_MS: { group: 'tuning', default: '10000' },
  KUBEBYON_LEASE_RETRY_PERIOD_MS: { group: 'tuning', default: '2000' },
} as const satisfies Record<string, Setting>;

export type SettingName = keyof typeof SETTINGS;

/**
 * Settings earlier releases read and this one does not: an install that still sets one starts as before,
 * with one warning naming it and saying why it is gone (each value is now a constant in code, with the
 * measurement that chose it, or the layout it chose is the only one).
 */
export const RETIRED_SETTINGS: Readonly<Record<string, string>> = {
  KUBEBYON_HAPROXY_ROUTING:
    'map routing is the only layout (an install on `rules` is moved to it by its first pass, routes kept)',
  KUBEBYON_HAPROXY_BALANCE: 'slots always use leastconn (API clients hold long-lived watch streams)',
  KUBEBYON_HAPROXY_MIN_SLOTS: 'the slot pool starts at 64 (MIN_SLOTS in src/haproxy/render.ts)',
  KUBEBYON_DATAPLANE_RUNTIME_MAX_SERVERS: 'endpoint moves always go through the runtime API',
  KUBEBYON_DATAPLANE_RUNTIME_MAX_REQUESTS: 'a constant (RUNTIME_MAX_REQUESTS in src/providers/dataplaneapi)',
  KUBEBYON_DATAPLANE_RAW_MIN_WRITES: 'every configuration change is one push of the file',
  KUBEBYON_DATAPLANE_COMMIT: 'no transactions are used any more',
  KUBEBYON_DATAPLANE_RELOAD_TIMEOUT_MS: 'use KUBEBYON_HAPROXY_RELOAD_TIMEOUT_MS (both providers)',
  KUBEBYON_RECONCILE_DEBOUNCE_MS: 'a constant (src/reconcile/reconciler-options.ts)',
  KUBEBYON_RECONCILE_MAX_DELAY_MS: 'a constant (src/reconcile/reconciler-options.ts)',
  KUBEBYON_RECONCILE_RETRIES: 'a constant (src/reconcile/reconciler-options.ts)',
  KUBEBYON_HAPROXY_WATCH_MS: 'a constant (src/reconcile/reconciler-options.ts)',
};

/** How long after a runtime change the files HAProxy loads follow (both providers; `KUBEBYON_PERSIST_DELAY_MS`). */
export const PERSIST_DELAY_MS = Number(SETTINGS.KUBEBYON_PERSIST_DELAY_MS.default);

/** The defaults, by name. */
export function settingDefaults(): Record<SettingName, string> {
  return Object.fromEntries(Object.entries(SETTINGS).map(([k, v]) => [k, v.default])) as Record<
    SettingName,
    string
  >;
}

/** One warning per retired setting `env` still sets. */
export function retiredSettingsIn(env: NodeJS.ProcessEnv): string[] {
  return Object.entries(RETIRED_SETTINGS)
    .filter(([name]) => env[name] !== undefined && env[name] !== '')
    .map(([name, why]) => `${name} is no longer read and is ignored: ${why}`);
}
