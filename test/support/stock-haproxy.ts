import pino, { type Logger } from 'pino';
import { DEFAULT_RENDER_OPTIONS, type RenderOptions } from '../../src/haproxy/render.js';
import type { StockHaproxyConfig } from '../../src/providers/haproxy/config.js';
import { StockHaproxyProvider } from '../../src/providers/haproxy/provider.js';
import type { Provider } from '../../src/providers/provider.js';
import { OwnedProvider } from '../../src/registry/owned-provider.js';
import { type HaproxyTestbed, type HaproxyVersion, startHaproxyTestbed } from './haproxy-testbed.js';
import { registry } from './owner.js';
import { freeLoopbackPort } from './ports.js';
import { type NamedTlsServer, startNamedTlsServer } from './tls.js';

/**
 * The operator's own configuration in tests of the stock-HAProxy provider: a foreign TLS frontend and its
 * backend. Its `defaults` is HTTP on purpose: the owned sections must not inherit it.
 */
export function operatorConfig(consolePort: number, backendPort: number): string {
  return `global
  stats socket /etc/kubebyon/admin.sock mode 600 level admin
defaults
  mode http
  timeout connect 2s
  timeout client 10s
  timeout server 10s
frontend console_https
  mode tcp
  bind 127.0.0.1:${consolePort}
  default_backend console
backend console
  mode tcp
  server web1 127.0.0.1:${backendPort}
`;
}

/** The provider's configuration for a test bed started with `ownedFile`. */
export function stockConfigFor(haproxy: HaproxyTestbed): StockHaproxyConfig {
  const owned = haproxy.owned;
  if (!owned) throw new Error('the test bed was started without an owned file');
  return {
    ownedFile: owned.path,
    checkFiles: owned.checkFiles,
    masterSocket: owned.masterSocket,
    haproxyBin: owned.checkBin,
    reloadTimeoutMs: 30_000,
  };
}

export function stockProviderFor(haproxy: HaproxyTestbed, logger: Logger = pino({ level: 'silent' })) {
  return new StockHaproxyProvider(stockConfigFor(haproxy), { logger, owner: registry });
}

/** `provider` behind the registry, as the service runs it: reads interpreted, plans checked and applied. */
export function ownedBy(provider: Provider): OwnedProvider {
  return new OwnedProvider(provider, registry);
}

/** What the map-routing suites run against: HAProxy with an owned file, the provider, two TLS servers. */
export interface StockMapBed {
  haproxy: HaproxyTestbed;
  provider: StockHaproxyProvider;
  /** `provider` behind the registry: what tests read, plan from and apply through. */
  owned: OwnedProvider;
  a: NamedTlsServer;
  b: NamedTlsServer;
  /** The SNI frontend's port (`render.bind`). */
  port: number;
  /** No health checks (the stand-ins are TLS servers, not API servers). */
  render: RenderOptions;
  close(): Promise<void>;
}

export async function startStockMapBed(version: HaproxyVersion, minSlots?: number): Promise<StockMapBed> {
  const [a, b] = await Promise.all([startNamedTlsServer('a'), startNamedTlsServer('b')]);
  const port = await freeLoopbackPort();
  const haproxy = await startHaproxyTestbed(
    operatorConfig(await freeLoopbackPort(), await freeLoopbackPort()),
    version,
    { ownedFile: true },
  );
  const provider = stockProviderFor(haproxy);
  const render: RenderOptions = {
    ...DEFAULT_RENDER_OPTIONS,
    ...(minSlots !== undefined ? { minSlots } : {}),
    bind: { address: '127.0.0.1', port },
    healthChecks: false,
  };
  return {
    haproxy,
    provider,
    owned: ownedBy(provider),
    a,
    b,
    port,
    render,
    close: async () => {
      await provider.close();
      await haproxy.stop();
      await Promise.all([a.close(), b.close()]);
    },
  };
}
