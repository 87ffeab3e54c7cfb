import { readFileSync } from 'node:fs';
import { isIP } from 'node:net';
import { hostname } from 'node:os';
import { z } from 'zod';
import { MIN_SLOTS, type RenderOptions } from '../haproxy/render.js';
import {
  allowMapNameFor,
  isHaproxyName,
  NAME_RULE,
  PREFIX_RULE,
  sniMapNameFor,
  validatePrefix,
} from '../naming/names.js';
import type { DataplaneConfig } from '../providers/dataplaneapi/config.js';
import type { StockHaproxyConfig } from '../providers/haproxy/config.js';
import { LOOP } from '../reconcile/reconciler-options.js';
import { OWNER_ID } from '../registry/registry.js';
import { parseBindAddr } from './bind.js';
import { type FleetConfig, fleetConfigOf } from './fleet-env.js';
import { retiredSettingsIn, SETTINGS, type SettingName, settingDefaults } from './settings.js';

/**
 * The service's whole configuration, from environment variables (and files they point to). Every variable,
 * with its one default and its group, is in `settings.ts`; `loadConfig` validates all of them at start and
 * names each bad one, and warns once for each retired one an install still sets.
 */
export const ENV_DEFAULTS: Readonly<Record<SettingName, string>> = settingDefaults();

const int = (min: number, max: number) => z.coerce.number().int().min(min).max(max);
const bool = z.enum(['true', 'false']).transform((v) => v === 'true');
/** 0 (the limit is not written) or a number in range. */
const offOr = (min: number, max: number) =>
  z.coerce
    .number()
    .int()
    .refine((n) => n === 0 || (n >= min && n <= max), `must be 0 (off) or ${min} to ${max}`);
const bindAddr = z.string().transform((raw, ctx) => {
  const parsed = parseBindAddr(raw);
  if (parsed.ok) return parsed.bind;
  ctx.addIssue({ code: 'custom', message: parsed.detail });
  return z.NEVER;
});
const ipList = z.string().transform((raw, ctx) => {
  const list = raw
    .split(',')
    .map((a) => a.trim())
    .filter(Boolean);
  for (const a of list) {
    if (isIP(a) === 0) ctx.addIssue({ code: 'custom', message: `${JSON.stringify(a)} is not an IP address` });
  }
  return list;
});
const pathList = z.string().transform((raw) =>
  raw
    .split(',')
    .map((a) => a.trim())
    .filter(Boolean),
);
const absolutePath = z.string().regex(/^\//, 'must be an absolute path');
const secretOf = (name: string, min: number) =>
  z.string().min(min, `required, at least ${min} characters (set ${name} or ${name}_FILE)`);

/** Settings every provider shares: the webhook, the objects rendered, the topology, the loop. */
const BaseFields = z.object({
  KUBEBYON_LISTEN_ADDR: bindAddr,
  KUBEBYON_STATE_FILE: z.string().min(1),
  KUBEBYON_LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']),
  KUBEBYON_WEBHOOK_SECRET: secretOf('KUBEBYON_WEBHOOK_SECRET', 16),
  KUBEBYON_WEBHOOK_AUTH: z.enum(['hmac', 'bearer']),
  KUBEBYON_WEBHOOK_REPLAY_WINDOW_SECONDS: int(10, 3600),
  KUBEBYON_WEBHOOK_BODY_LIMIT_BYTES: int(1024, 64 * 1024 * 1024),
  KUBEBYON_WAIT_TIMEOUT_MS: int(100, 600_000),
  KUBEBYON_SHUTDOWN_GRACE_MS: int(0, 600_000),
  KUBEBYON_PROVIDER: z.enum(['dataplaneapi', 'haproxy', 'memory']),
  KUBEBYON_OWNER_ID: z
    .string()
    .regex(OWNER_ID, 'must be 1-63 of a-z 0-9 . _ -, starting and ending with a letter or digit'),
  KUBEBYON_HAPROXY_BIND_ADDR: bindAddr,
  KUBEBYON_HAPROXY_FRONTEND_NAME: z.string().refine(isHaproxyName, `must be ${NAME_RULE}`),
  KUBEBYON_HAPROXY_NAME_PREFIX: z.string().refine(validatePrefix, `must be ${PREFIX_RULE}`),
  KUBEBYON_HAPROXY_DEFAULT_BACKEND: z.union([
    z.literal(''),
    z.string().refine(isHaproxyName, `must be an HAProxy backend name (${NAME_RULE})`),
  ]),
  KUBEBYON_HAPROXY_INSPECT_DELAY_MS: int(100, 30_000),
  KUBEBYON_HAPROXY_HEALTH_CHECKS: bool,
  KUBEBYON_HAPROXY_ACCEPT_PROXY: bool,
  KUBEBYON_HAPROXY_MAXCONN: offOr(100, 1_000_000),
  KUBEBYON_HAPROXY_MAX_CONN_PER_SOURCE: offOr(10, 1_000_000),
  KUBEBYON_HAPROXY_MAX_CONN_RATE_PER_SOURCE: offOr(20, 10_000_000),
  KUBEBYON_HAPROXY_SOURCE_TABLE_SIZE: int(1000, 10_000_000),
  KUBEBYON_HAPROXY_NODE_ADDRESS_TYPE: z.enum(['internal', 'external']),
  KUBEBYON_PUBLIC_PORT: int(1, 65535),
  KUBEBYON_TOPOLOGY: z.enum(['static', 'kubernetes']),
  KUBEBYON_STATIC_NODE_ADDRESSES: ipList,
  KUBEBYON_KUBERNETES_EXCLUDE_NOT_READY: bool,
  KUBEBYON_PERSIST_DELAY_MS: int(0, 60_000),
  KUBEBYON_RESYNC_INTERVAL_MS: int(0, 86_400_000),
});

/** The variables that shape the rendered HAProxy objects and the endpoints reported for them. */
const RENDER_FIELDS = {
  KUBEBYON_HAPROXY_BIND_ADDR: true,
  KUBEBYON_HAPROXY_FRONTEND_NAME: true,
  KUBEBYON_HAPROXY_NAME_PREFIX: true,
  KUBEBYON_HAPROXY_DEFAULT_BACKEND: true,
  KUBEBYON_HAPROXY_INSPECT_DELAY_MS: true,
  KUBEBYON_HAPROXY_HEALTH_CHECKS: true,
  KUBEBYON_HAPROXY_ACCEPT_PROXY: true,
  KUBEBYON_HAPROXY_MAXCONN: true,
  KUBEBYON_HAPROXY_MAX_CONN_PER_SOURCE: true,
  KUBEBYON_HAPROXY_MAX_CONN_RATE_PER_SOURCE: true,
  KUBEBYON_HAPROXY_SOURCE_TABLE_SIZE: true,
  KUBEBYON_OWNER_ID: true,
  KUBEBYON_PUBLIC_PORT: true,
} as const;
type RenderFields = Pick<z.output<typeof BaseFields>, keyof typeof RENDER_FIELDS>;

const renderOf = (e: RenderFields): RenderOptions => ({
  bind: e.KUBEBYON_HAPROXY_ACCEPT_PROXY
    ? { ...e.KUBEBYON_HAPROXY_BIND_ADDR, acceptProxy: true }
    : e.KUBEBYON_HAPROXY_BIND_ADDR,
  frontendName: e.KUBEBYON_HAPROXY_FRONTEND_NAME,
  namePrefix: e.KUBEBYON_HAPROXY_NAME_PREFIX,
  defaultBackend: e.KUBEBYON_HAPROXY_DEFAULT_BACKEND || null,
  inspectDelayMs: e.KUBEBYON_HAPROXY_INSPECT_DELAY_MS,
  // Leastconn: API clients hold long-lived watch streams; spreading by open connections keeps nodes even.
  balance: 'leastconn',
  healthChecks: e.KUBEBYON_HAPROXY_HEALTH_CHECKS,
  // One map per owner, so two adapters on one HAProxy never share one.
  sniMap: sniMapNameFor(e.KUBEBYON_OWNER_ID),
  allowMap: allowMapNameFor(e.KUBEBYON_OWNER_ID),
  minSlots: MIN_SLOTS,
  maxConn: e.KUBEBYON_HAPROXY_MAXCONN,
  perSource: {
    maxConn: e.KUBEBYON_HAPROXY_MAX_CONN_PER_SOURCE,
    maxRate: e.KUBEBYON_HAPROXY_MAX_CONN_RATE_PER_SOURCE,
    tableSize: e.KUBEBYON_HAPROXY_SOURCE_TABLE_SIZE,
  },
});

const BaseEnv = BaseFields.transform((e) => ({
  listen: {
    host: e.KUBEBYON_LISTEN_ADDR.address === '*' ? '0.0.0.0' : e.KUBEBYON_LISTEN_ADDR.address,
    port: e.KUBEBYON_LISTEN_ADDR.port,
  },
  stateFile: e.KUBEBYON_STATE_FILE,
  logLevel: e.KUBEBYON_LOG_LEVEL,
  ownerId: e.KUBEBYON_OWNER_ID,
  shutdownGraceMs: e.KUBEBYON_SHUTDOWN_GRACE_MS,
  webhook: {
    auth: e.KUBEBYON_WEBHOOK_AUTH,
    secret: e.KUBEBYON_WEBHOOK_SECRET,
    replayWindowSeconds: e.KUBEBYON_WEBHOOK_REPLAY_WINDOW_SECONDS,
    bodyLimitBytes: e.KUBEBYON_WEBHOOK_BODY_LIMIT_BYTES,
    waitTimeoutMs: e.KUBEBYON_WAIT_TIMEOUT_MS,
  },
  haproxy: { ...renderOf(e), nodeAddressType: e.KUBEBYON_HAPROXY_NODE_ADDRESS_TYPE },
  publicPort: e.KUBEBYON_PUBLIC_PORT,
  topology: {
    kind: e.KUBEBYON_TOPOLOGY,
    nodeAddresses: e.KUBEBYON_STATIC_NODE_ADDRESSES,
    excludeNotReady: e.KUBEBYON_KUBERNETES_EXCLUDE_NOT_READY,
  },
  reconcile: { ...LOOP, resyncIntervalMs: e.KUBEBYON_RESYNC_INTERVAL_MS },
  persistDelayMs: e.KUBEBYON_PERSIST_DELAY_MS,
}));

/** `KUBEBYON_PROVIDER=dataplaneapi` (the default): HAProxy's Data Plane API v3. */
const DataplaneEnv = z
  .object({
    KUBEBYON_DATAPLANE_URL: z.url({ protocol: /^https?$/ }),
    KUBEBYON_DATAPLANE_USERNAME: z.string().min(1).max(128),
    KUBEBYON_DATAPLANE_PASSWORD: secretOf('KUBEBYON_DATAPLANE_PASSWORD', 1),
    KUBEBYON_DATAPLANE_TIMEOUT_MS: int(100, 600_000),
    KUBEBYON_HAPROXY_RELOAD_TIMEOUT_MS: int(1000, 600_000),
    KUBEBYON_DATAPLANE_SLOTS: z.enum(['config', 'storage']),
  })
  .transform(
    (e): DataplaneProviderConfig => ({
      kind: 'dataplaneapi',
      url: e.KUBEBYON_DATAPLANE_URL,
      username: e.KUBEBYON_DATAPLANE_USERNAME,
      password: e.KUBEBYON_DATAPLANE_PASSWORD,
      timeoutMs: e.KUBEBYON_DATAPLANE_TIMEOUT_MS,
      reloadTimeoutMs: e.KUBEBYON_HAPROXY_RELOAD_TIMEOUT_MS,
      slots: e.KUBEBYON_DATAPLANE_SLOTS,
    }),
  );

/** `KUBEBYON_PROVIDER=haproxy`: a stock HAProxy, through an owned `-f` file, the master CLI and the runtime API. */
const StockHaproxyEnv = z
  .object({
    KUBEBYON_HAPROXY_OWNED_FILE: absolutePath,
    KUBEBYON_HAPROXY_CHECK_FILES: pathList.pipe(
      z.array(absolutePath).min(1, 'name the files HAProxy loads before the owned file'),
    ),
    KUBEBYON_HAPROXY_MASTER_SOCKET: absolutePath,
    KUBEBYON_HAPROXY_BIN: z.string().min(1),
    KUBEBYON_HAPROXY_RELOAD_TIMEOUT_MS: int(1000, 600_000),
  })
  // The owned file is replaced on every change: it must never be one of the operator's files.
  .refine((e) => !e.KUBEBYON_HAPROXY_CHECK_FILES.includes(e.KUBEBYON_HAPROXY_OWNED_FILE), {
    path: ['KUBEBYON_HAPROXY_CHECK_FILES'],
    message: 'must not include KUBEBYON_HAPROXY_OWNED_FILE',
  })
  .transform(
    (e): StockHaproxyProviderConfig => ({
      kind: 'haproxy',
      ownedFile: e.KUBEBYON_HAPROXY_OWNED_FILE,
      checkFiles: e.KUBEBYON_HAPROXY_CHECK_FILES,
      masterSocket: e.KUBEBYON_HAPROXY_MASTER_SOCKET,
      haproxyBin: e.KUBEBYON_HAPROXY_BIN,
      reloadTimeoutMs: e.KUBEBYON_HAPROXY_RELOAD_TIMEOUT_MS,
    }),
  );

// Each provider declares the settings it takes; the environment is mapped onto them here.
type DataplaneProviderConfig = { kind: 'dataplaneapi' } & DataplaneConfig;
type StockHaproxyProviderConfig = { kind: 'haproxy' } & StockHaproxyConfig;
/** `KUBEBYON_PROVIDER=memory`: no HAProxy; the reference provider keeps the objects in memory (trying the API). */
type MemoryProviderConfig = { kind: 'memory' };
export type ProviderConfig = DataplaneProviderConfig | StockHaproxyProviderConfig | MemoryProviderConfig;
const MemoryEnv = z.object({}).transform((): MemoryProviderConfig => ({ kind: 'memory' }));
/** The whole configuration: inferred from the schemas above, never written beside them. */
export type Config = z.output<typeof BaseEnv> & {
  provider: ProviderConfig;
  fleet: FleetConfig;
  /** One line per retired setting the environment still sets: logged once at start. */
  warnings: string[];
};

export class ConfigError extends Error {
  constructor(readonly problems: string[]) {
    super(`invalid configuration:\n${problems.map((p) => `  - ${p}`).join('\n')}`);
    this.name = 'ConfigError';
  }
}

/** Variables that hold secrets: each may instead be read from the file that VAR_FILE names. */
export const SECRET_VARS = (Object.keys(SETTINGS) as SettingName[]).filter(
  (name) => 'secret' in SETTINGS[name],
);

/**
 * A secret from VAR, or from the file VAR_FILE names (the usual way to mount Kubernetes secrets).
 * `problem` says why it could not be had; the value is then empty.
 */
export function readSecret(env: NodeJS.ProcessEnv, name: string): { value: string; problem?: string } {
  const direct = env[name];
  const file = env[`${name}_FILE`];
  if (direct && file) return { value: '', problem: `${name}: set either ${name} or ${name}_FILE, not both` };
  if (!file) return { value: direct ?? '' };
  try {
    return { value: readFileSync(file, 'utf8').trim() };
  } catch (err) {
    return { value: '', problem: `${name}_FILE: cannot read ${file}: ${(err as Error).message}` };
  }
}

/** Reads and checks the configuration; throws a ConfigError listing every problem at once. */
export function loadConfig(env: NodeJS.ProcessEnv): Config {
  const merged = withDefaults(env);
  const problems: string[] = [];
  for (const name of SECRET_VARS) {
    const { value, problem } = readSecret(env, name);
    if (problem) problems.push(problem);
    merged[name] = value;
  }
  const base = BaseEnv.safeParse(merged);
  const schemas = { haproxy: StockHaproxyEnv, memory: MemoryEnv, dataplaneapi: DataplaneEnv } as const;
  const chosen = merged.KUBEBYON_PROVIDER as keyof typeof schemas;
  const provider = (schemas[chosen] ?? DataplaneEnv).safeParse(merged);
  for (const result of [base, provider]) {
    if (result.success) continue;
    for (const issue of result.error.issues) {
      const name = String(issue.path[0] ?? '');
      // A secret that could not be read is already named, with why.
      if (!problems.some((p) => p.startsWith(`${name}:`) || p.startsWith(`${name}_FILE:`)))
        problems.push(`${name}: ${issue.message}`);
    }
  }
  const fleet = fleetConfigOf(merged, chosen, problems, hostname);
  if (problems.length > 0 || !base.success || !provider.success || !fleet) throw new ConfigError(problems);
  return { ...base.data, provider: provider.data, fleet, warnings: retiredSettingsIn(env) };
}

/**
 * Only the variables that shape the rendered objects (for `render`, which needs no secret and no HAProxy),
 * checked by the same rules as `loadConfig`; throws a ConfigError listing every problem.
 */
export function loadRenderConfig(env: NodeJS.ProcessEnv): { render: RenderOptions; publicPort: number } {
  const parsed = BaseFields.pick(RENDER_FIELDS).safeParse(withDefaults(env));
  if (!parsed.success)
    throw new ConfigError(parsed.error.issues.map((i) => `${String(i.path[0] ?? '')}: ${i.message}`));
  return { render: renderOf(parsed.data), publicPort: parsed.data.KUBEBYON_PUBLIC_PORT };
}

// An unset or empty variable takes its default.
function withDefaults(env: NodeJS.ProcessEnv): Record<string, string> {
  const merged: Record<string, string> = { ...ENV_DEFAULTS };
  for (const key of Object.keys(ENV_DEFAULTS)) {
    const value = env[key];
    if (value !== undefined && value !== '') merged[key] = value;
  }
  return merged;
}

/** The rendering settings of a configuration (the HAProxy objects' names, bind and server options). */
export function renderOptionsOf(haproxy: Config['haproxy']): RenderOptions {
  const { nodeAddressType: _notRendered, ...render } = haproxy;
  return render;
}
