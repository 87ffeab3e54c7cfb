import pino, { type Logger } from 'pino';
import type { StockHaproxyConfig } from '../../src/providers/haproxy/config.js';
import { StockHaproxyProvider } from '../../src/providers/haproxy/provider.js';
import type { HaproxyTestbed } from './haproxy-testbed.js';
import { registry } from './owner.js';

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
