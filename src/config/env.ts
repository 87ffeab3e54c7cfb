import { readFileSync } from 'node:fs';
import { isIP } from 'node:net';
import { z } from 'zod';
import type { Bind } from '../haproxy/model.js';
import type { RenderOptions } from '../haproxy/render.js';
import { DEFAULT_PREFIX, validatePrefix } from '../naming/names.js';
import { parseBindAddr } from './bind.js';

/**
 * The service's whole configuration, from environment variables (and files they point to). Every variable is
 * listed here with its default; `loadConfig` validates all of them at start and names each bad one.
 */
export const ENV_DEFAULTS = {
  KUBEBYON_LISTEN_ADDR: '0.0.0.0:8080',
  KUBEBYON_STATE_FILE: '/var/lib/kubebyon-haproxy-adapter/clusters.json',
  KUBEBYON_LOG_LEVEL: 'info',
  KUBEBYON_WEBHOOK_AUTH: 'hmac',
  KUBEBYON_WEBHOOK_REPLAY_WINDOW_SECONDS: '300',
  KUBEBYON_WEBHOOK_BODY_LIMIT_BYTES: '1048576',
  KUBEBYON_WAIT_TIMEOUT_MS: '30000',
  KUBEBYON_HAPROXY_BIND_ADDR: ':443',
  KUBEBYON_HAPROXY_FRONTEND_NAME: 'kubebyon_sni',
  KUBEBYON_HAPROXY_NAME_PREFIX: DEFAULT_PREFIX,
  KUBEBYON_HAPROXY_DEFAULT_BACKEND: '',
  KUBEBYON_HAPROXY_INSPECT_DELAY_MS: '5000',
  KUBEBYON_HAPROXY_BALANCE: 'leastconn',
  KUBEBYON_HAPROXY_HEALTH_CHECKS: 'true',
  KUBEBYON_HAPROXY_NODE_ADDRESS_TYPE: 'internal',
  KUBEBYON_PUBLIC_PORT: '443',
  KUBEBYON_TOPOLOGY: 'static',
  KUBEBYON_STATIC_NODE_ADDRESSES: '',
  KUBEBYON_KUBERNETES_EXCLUDE_NOT_READY: 'true',
  KUBEBYON_DATAPLANE_URL: 'http://127.0.0.1:5555',
  KUBEBYON_DATAPLANE_USERNAME: 'admin',
  KUBEBYON_RECONCILE_DEBOUNCE_MS: '200',
  KUBEBYON_RECONCILE_MAX_DELAY_MS: '2000',
  KUBEBYON_RESYNC_INTERVAL_MS: '60000',
  KUBEBYON_RECONCILE_RETRIES: '5',
} as const;

const HAPROXY_NAME = /^[A-Za-z0-9_.:-]{1,64}$/;
const int = (min: number, max: number) => z.coerce.number().int().min(min).max(max);

const EnvSchema = z.object({
  KUBEBYON_LISTEN_ADDR: z.string(),
  KUBEBYON_STATE_FILE: z.string().min(1),
  KUBEBYON_LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']),
  KUBEBYON_WEBHOOK_AUTH: z.enum(['hmac', 'bearer']),
  KUBEBYON_WEBHOOK_REPLAY_WINDOW_SECONDS: int(10, 3600),
  KUBEBYON_WEBHOOK_BODY_LIMIT_BYTES: int(1024, 64 * 1024 * 1024),
  KUBEBYON_WAIT_TIMEOUT_MS: int(100, 600_000),
  KUBEBYON_HAPROXY_BIND_ADDR: z.string(),
  KUBEBYON_HAPROXY_FRONTEND_NAME: z.string().regex(HAPROXY_NAME, 'must be 1-64 of A-Z a-z 0-9 _ . : -'),
  KUBEBYON_HAPROXY_NAME_PREFIX: z
    .string()
    .refine(validatePrefix, 'must be a lower-case letter then up to 23 of a-z 0-9 _'),
  KUBEBYON_HAPROXY_DEFAULT_BACKEND: z.union([
    z.literal(''),
    z.string().regex(HAPROXY_NAME, 'must be an HAProxy backend name'),
  ]),
  KUBEBYON_HAPROXY_INSPECT_DELAY_MS: int(100, 60_000),
  KUBEBYON_HAPROXY_BALANCE: z.enum(['leastconn', 'roundrobin', 'source']),
  KUBEBYON_HAPROXY_HEALTH_CHECKS: z.enum(['true', 'false']),
  KUBEBYON_HAPROXY_NODE_ADDRESS_TYPE: z.enum(['internal', 'external']),
  KUBEBYON_PUBLIC_PORT: int(1, 65535),
  KUBEBYON_TOPOLOGY: z.enum(['static', 'kubernetes']),
  KUBEBYON_STATIC_NODE_ADDRESSES: z.string(),
  KUBEBYON_KUBERNETES_EXCLUDE_NOT_READY: z.enum(['true', 'false']),
  KUBEBYON_DATAPLANE_URL: z.url({ protocol: /^https?$/ }),
  KUBEBYON_DATAPLANE_USERNAME: z.string().min(1).max(128),
  KUBEBYON_RECONCILE_DEBOUNCE_MS: int(0, 60_000),
  KUBEBYON_RECONCILE_MAX_DELAY_MS: int(0, 600_000),
  KUBEBYON_RESYNC_INTERVAL_MS: int(0, 86_400_000),
  KUBEBYON_RECONCILE_RETRIES: int(0, 20),
});

export interface Config {
  listen: { host: string; port: number };
  stateFile: string;
  logLevel: z.infer<typeof EnvSchema>['KUBEBYON_LOG_LEVEL'];
  webhook: {
    auth: 'hmac' | 'bearer';
    secret: string;
    replayWindowSeconds: number;
    bodyLimitBytes: number;
    waitTimeoutMs: number;
  };
  haproxy: {
    bind: Bind;
    frontendName: string;
    namePrefix: string;
    defaultBackend: string | null;
    inspectDelayMs: number;
    balance: 'leastconn' | 'roundrobin' | 'source';
    healthChecks: boolean;
    nodeAddressType: 'internal' | 'external';
  };
  publicPort: number;
  topology: { kind: 'static' | 'kubernetes'; nodeAddresses: string[]; excludeNotReady: boolean };
  /** HAProxy's Data Plane API: where the provider applies plans. */
  dataplane: { url: string; username: string; password: string };
  reconcile: { debounceMs: number; maxDelayMs: number; resyncIntervalMs: number; retries: number };
}

export class ConfigError extends Error {
  constructor(readonly problems: string[]) {
    super(`invalid configuration:\n${problems.map((p) => `  - ${p}`).join('\n')}`);
    this.name = 'ConfigError';
  }
}

/** Variables that hold secrets: each may instead be read from the file that VAR_FILE names. */
export const SECRET_VARS = ['KUBEBYON_WEBHOOK_SECRET', 'KUBEBYON_DATAPLANE_PASSWORD'] as const;

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

function secretFrom(env: NodeJS.ProcessEnv, name: string, problems: string[], minLength: number): string {
  const { value, problem } = readSecret(env, name);
  if (problem) problems.push(problem);
  else if (value.length < minLength) {
    problems.push(`${name}: required, at least ${minLength} characters (set ${name} or ${name}_FILE)`);
  }
  return value;
}

/** Reads and checks the configuration; throws a ConfigError listing every problem at once. */
export function loadConfig(env: NodeJS.ProcessEnv): Config {
  const merged: Record<string, string> = { ...ENV_DEFAULTS };
  for (const key of Object.keys(ENV_DEFAULTS)) {
    const value = env[key];
    if (value !== undefined && value !== '') merged[key] = value;
  }
  const problems: string[] = [];
  const parsed = EnvSchema.safeParse(merged);
  if (!parsed.success) {
    for (const issue of parsed.error.issues) problems.push(`${issue.path.join('.')}: ${issue.message}`);
  }
  const secret = secretFrom(env, 'KUBEBYON_WEBHOOK_SECRET', problems, 16);
  const dataplanePassword = secretFrom(env, 'KUBEBYON_DATAPLANE_PASSWORD', problems, 1);
  const bind = parseBindAddr(merged.KUBEBYON_HAPROXY_BIND_ADDR ?? '');
  if (!bind.ok) problems.push(`KUBEBYON_HAPROXY_BIND_ADDR: ${bind.detail}`);
  const listen = parseBindAddr(merged.KUBEBYON_LISTEN_ADDR ?? '');
  if (!listen.ok) problems.push(`KUBEBYON_LISTEN_ADDR: ${listen.detail}`);
  const nodeAddresses = (merged.KUBEBYON_STATIC_NODE_ADDRESSES ?? '')
    .split(',')
    .map((a) => a.trim())
    .filter(Boolean);
  for (const a of nodeAddresses) {
    if (isIP(a) === 0)
      problems.push(`KUBEBYON_STATIC_NODE_ADDRESSES: ${JSON.stringify(a)} is not an IP address`);
  }
  if (problems.length > 0 || !parsed.success || !bind.ok || !listen.ok) throw new ConfigError(problems);
  const e = parsed.data;
  return {
    listen: { host: listen.bind.address === '*' ? '0.0.0.0' : listen.bind.address, port: listen.bind.port },
    stateFile: e.KUBEBYON_STATE_FILE,
    logLevel: e.KUBEBYON_LOG_LEVEL,
    webhook: {
      auth: e.KUBEBYON_WEBHOOK_AUTH,
      secret,
      replayWindowSeconds: e.KUBEBYON_WEBHOOK_REPLAY_WINDOW_SECONDS,
      bodyLimitBytes: e.KUBEBYON_WEBHOOK_BODY_LIMIT_BYTES,
      waitTimeoutMs: e.KUBEBYON_WAIT_TIMEOUT_MS,
    },
    haproxy: {
      bind: bind.bind,
      frontendName: e.KUBEBYON_HAPROXY_FRONTEND_NAME,
      namePrefix: e.KUBEBYON_HAPROXY_NAME_PREFIX,
      defaultBackend: e.KUBEBYON_HAPROXY_DEFAULT_BACKEND || null,
      inspectDelayMs: e.KUBEBYON_HAPROXY_INSPECT_DELAY_MS,
      balance: e.KUBEBYON_HAPROXY_BALANCE,
      healthChecks: e.KUBEBYON_HAPROXY_HEALTH_CHECKS === 'true',
      nodeAddressType: e.KUBEBYON_HAPROXY_NODE_ADDRESS_TYPE,
    },
    publicPort: e.KUBEBYON_PUBLIC_PORT,
    topology: {
      kind: e.KUBEBYON_TOPOLOGY,
      nodeAddresses,
      excludeNotReady: e.KUBEBYON_KUBERNETES_EXCLUDE_NOT_READY === 'true',
    },
    dataplane: {
      url: e.KUBEBYON_DATAPLANE_URL,
      username: e.KUBEBYON_DATAPLANE_USERNAME,
      password: dataplanePassword,
    },
    reconcile: {
      debounceMs: e.KUBEBYON_RECONCILE_DEBOUNCE_MS,
      maxDelayMs: e.KUBEBYON_RECONCILE_MAX_DELAY_MS,
      resyncIntervalMs: e.KUBEBYON_RESYNC_INTERVAL_MS,
      retries: e.KUBEBYON_RECONCILE_RETRIES,
    },
  };
}

/** The rendering settings of a configuration (the HAProxy objects' names, bind and server options). */
export function renderOptionsOf(haproxy: Config['haproxy']): RenderOptions {
  const { nodeAddressType: _notRendered, ...render } = haproxy;
  return render;
}
