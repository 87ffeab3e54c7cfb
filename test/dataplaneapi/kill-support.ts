import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  type DataplaneSource,
  type DataplaneTestbed,
  DPAPI_USER,
  foreignConfig,
  startDataplaneTestbed,
} from '../support/dataplaneapi-testbed.js';
import { haproxyVersionUnderTest } from '../support/haproxy-testbed.js';
import { freeLoopbackPort } from '../support/ports.js';
import { type NamedTlsServer, startNamedTlsServer } from '../support/tls.js';

/** A seeded PRNG: a failing run is repeated with the seed it printed (KUBEBYON_FAULT_SEED in faults). */
export { random } from '../support/random.js';

/** One transaction as `GET /v3/services/haproxy/transactions` lists it. */
export interface ApiTransaction {
  id: string;
  status: string;
  _version?: number;
}

/**
 * HAProxy with the Data Plane API beside it (the test bed's container), TLS servers standing in for the
 * clusters' API servers and for the console (the foreign default backend), and what the service needs to
 * drive it. Made for the kill proof; nothing here starts the service.
 */
export interface KillBed {
  tb: DataplaneTestbed;
  /** The foreign default backend's server: a host HAProxy has no route for reaches it. */
  console: NamedTlsServer;
  /** Stand-ins for the clusters' API servers, by name. */
  servers: NamedTlsServer[];
  sniPort: number;
  secret: string;
  /** The service's environment for a state file in `stateDir`. */
  env(stateDir: string): Record<string, string>;
  /** Every transaction the API lists, whatever its status. */
  transactions(): Promise<ApiTransaction[]>;
  /** The ids of the transactions the API lists as in progress, sorted. */
  openTransactions(): Promise<string[]>;
  configVersion(): Promise<number>;
  /** Opens a transaction as another tool would; its id. */
  openTransaction(version: number): Promise<string>;
  /** Moves the configuration's version on without changing a line (the text pushed back as read). */
  bumpVersion(): Promise<number>;
  stop(): Promise<void>;
}

export async function startKillBed(source: DataplaneSource, serverNames: string[]): Promise<KillBed> {
  const consoleTls = await startNamedTlsServer('console');
  const servers = await Promise.all(serverNames.map((n) => startNamedTlsServer(n)));
  const tb = await startDataplaneTestbed(
    source,
    haproxyVersionUnderTest(),
    foreignConfig({ consolePort: await freeLoopbackPort(), consoleBackendPort: consoleTls.port }),
  );
  const sniPort = await freeLoopbackPort();
  const secret = randomBytes(24).toString('hex');
  const ok = <T>(what: string, res: { status: number; data: unknown }): T => {
    if (res.status >= 300) throw new Error(`${what}: ${res.status} ${JSON.stringify(res.data)}`);
    return res.data as T;
  };
  const configVersion = async () =>
    ok<number>('reading the version', await tb.api.get('/services/haproxy/configuration/version'));
  const transactions = async () =>
    ok<ApiTransaction[]>('listing transactions', await tb.api.get('/services/haproxy/transactions')) ?? [];
  return {
    tb,
    console: consoleTls,
    servers,
    sniPort,
    secret,
    env: (stateDir) => ({
      KUBEBYON_PROVIDER: 'dataplaneapi',
      KUBEBYON_STATE_FILE: join(stateDir, 'clusters.json'),
      KUBEBYON_DATAPLANE_URL: tb.url,
      KUBEBYON_DATAPLANE_USERNAME: DPAPI_USER,
      KUBEBYON_DATAPLANE_PASSWORD: tb.password,
      KUBEBYON_DATAPLANE_TIMEOUT_MS: '20000',
      KUBEBYON_HAPROXY_RELOAD_TIMEOUT_MS: '20000',
      KUBEBYON_HAPROXY_BIND_ADDR: `127.0.0.1:${sniPort}`,
      KUBEBYON_PUBLIC_PORT: String(sniPort),
      KUBEBYON_HAPROXY_DEFAULT_BACKEND: 'console_tls',
      // The stand-ins are plain TLS servers: no health checks to wait for.
      KUBEBYON_HAPROXY_HEALTH_CHECKS: 'false',
      KUBEBYON_STATIC_NODE_ADDRESSES: '127.0.0.1',
      KUBEBYON_LOG_LEVEL: 'warn',
    }),
    transactions,
    async openTransactions() {
      return (await transactions())
        .filter((t) => t.status === 'in_progress')
        .map((t) => t.id)
        .sort();
    },
    configVersion,
    async openTransaction(version) {
      const res = await tb.api.post(`/services/haproxy/transactions?version=${version}`);
      return ok<{ id: string }>('opening a transaction', res).id;
    },
    async bumpVersion() {
      const version = await configVersion();
      const text = ok<string>(
        'reading the configuration',
        await tb.api.get('/services/haproxy/configuration/raw', { responseType: 'text' }),
      );
      ok(
        'pushing the configuration back',
        await tb.api.post(
          `/services/haproxy/configuration/raw?version=${version}&skip_reload=true`,
          String(text),
          { headers: { 'content-type': 'text/plain' } },
        ),
      );
      return configVersion();
    },
    async stop() {
      await tb.stop();
      for (const s of [consoleTls, ...servers]) await s.close();
    },
  };
}

/** A fresh folder for a state file; removed with `rmSync` by the caller. */
export function stateFolder(): string {
  return mkdtempSync(join(tmpdir(), 'kubebyon-kill-'));
}

export function removeFolder(dir: string): void {
  rmSync(dir, { recursive: true, force: true });
}
