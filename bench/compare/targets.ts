import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import type { StockHaproxyConfig } from '../../src/providers/haproxy/config.js';
import { parseShowProc } from '../../src/providers/haproxy/runtime-text.js';
import {
  type DataplaneSource,
  DPAPI_USER,
  foreignConfig,
  startDataplaneTestbed,
} from '../../test/support/dataplaneapi-testbed.js';
import { type HaproxyVersion, startHaproxyTestbed } from '../../test/support/haproxy-testbed.js';
import { freeLoopbackPort } from '../../test/support/ports.js';
import { operatorConfig } from '../../test/support/stock-haproxy.js';
import { type CountingProxy, startCountingProxy } from './counting-proxy.js';

const run = promisify(execFile);

export type ProviderName = 'haproxy' | 'dataplaneapi';

/** A fresh real HAProxy (and Data Plane API) for one approach at one N, on loopback with host networking. */
export interface Target {
  provider: ProviderName;
  sniPort: number;
  /** The text HAProxy started with (the operator's part). */
  baseConfig: string;
  /** HAProxy's successful (re)loads: the master's reload counter less its failures (`show proc`). */
  loads(): Promise<number>;
  /** HAProxy worker processes alive (current and old ones still serving connections), from `show proc`. */
  workers(): Promise<number>;
  masterCli(command: string): Promise<string>;
  /** The environment that points the service's provider at this HAProxy. */
  providerEnv(): Record<string, string>;
  dataplane?: { proxy: CountingProxy; apiUrl: string; password: string; containerId: string };
  stock?: StockHaproxyConfig & { containerId: string };
  stop(): Promise<void>;
}

/** What a target reads alike from either provider's HAProxy: its master CLI. */
function fromMaster(
  provider: ProviderName,
  sniPort: number,
  baseConfig: string,
  masterCli: (command: string) => Promise<string>,
): Pick<Target, 'provider' | 'sniPort' | 'baseConfig' | 'loads' | 'workers' | 'masterCli'> {
  return {
    provider,
    sniPort,
    baseConfig,
    loads: async () => {
      const proc = parseShowProc(await masterCli('show proc'));
      return proc.reloads - proc.failed;
    },
    workers: async () => parseShowProc(await masterCli('show proc')).workers.length,
    masterCli,
  };
}

export async function startTarget(
  provider: ProviderName,
  version: HaproxyVersion,
  source: DataplaneSource | undefined,
): Promise<Target> {
  const sniPort = await freeLoopbackPort();
  const consolePort = await freeLoopbackPort();
  if (provider === 'dataplaneapi') {
    if (!source) throw new Error('the dataplaneapi provider needs KUBEBYON_TEST_DATAPLANEAPI_BIN or _IMAGE');
    const base = foreignConfig({ consolePort, consoleBackendPort: 9 });
    const tb = await startDataplaneTestbed(source, version, base);
    const proxy = await startCountingProxy(tb.url);
    return {
      ...fromMaster(provider, sniPort, base, tb.masterCli),
      providerEnv: () => ({
        KUBEBYON_PROVIDER: 'dataplaneapi',
        KUBEBYON_DATAPLANE_URL: proxy.url,
        KUBEBYON_DATAPLANE_USERNAME: DPAPI_USER,
        KUBEBYON_DATAPLANE_PASSWORD: tb.password,
        KUBEBYON_DATAPLANE_TIMEOUT_MS: '600000',
        KUBEBYON_HAPROXY_RELOAD_TIMEOUT_MS: '600000',
      }),
      dataplane: { proxy, apiUrl: tb.url, password: tb.password, containerId: tb.containerId },
      async stop() {
        await proxy.close();
        await tb.stop();
      },
    };
  }
  const base = operatorConfig(consolePort, 9);
  const tb = await startHaproxyTestbed(base, version, { ownedFile: true });
  const owned = tb.owned;
  if (!owned) throw new Error('the test bed has no owned file');
  const containerId = /docker exec (\S+) /.exec((await run('cat', [owned.checkBin])).stdout)?.[1] as string;
  const stock: StockHaproxyConfig & { containerId: string } = {
    ownedFile: owned.path,
    checkFiles: owned.checkFiles,
    masterSocket: owned.masterSocket,
    haproxyBin: owned.checkBin,
    reloadTimeoutMs: 600_000,
    containerId,
  };
  return {
    ...fromMaster(provider, sniPort, base, tb.masterCli),
    providerEnv: () => ({
      KUBEBYON_PROVIDER: 'haproxy',
      KUBEBYON_HAPROXY_OWNED_FILE: owned.path,
      KUBEBYON_HAPROXY_CHECK_FILES: owned.checkFiles.join(','),
      KUBEBYON_HAPROXY_MASTER_SOCKET: owned.masterSocket,
      KUBEBYON_HAPROXY_BIN: owned.checkBin,
      KUBEBYON_HAPROXY_RELOAD_TIMEOUT_MS: '600000',
    }),
    stock,
    stop: () => tb.stop(),
  };
}
