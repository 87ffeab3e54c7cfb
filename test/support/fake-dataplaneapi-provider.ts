import pino from 'pino';
import { DEFAULT_RENDER_OPTIONS, type RenderOptions } from '../../src/haproxy/render.js';
import type { DataplaneConfig } from '../../src/providers/dataplaneapi/config.js';
import {
  DataplaneProvider,
  type DataplaneProviderOptions,
} from '../../src/providers/dataplaneapi/provider.js';
import type { RouteClaim } from '../../src/routes/route.js';
import type { FakeDataplaneApi } from './fake-dataplaneapi.js';
import { registry } from './owner.js';

/** A provider against the fake API: short timeouts, the test owner; `extra` overrides any of them. */
export function providerOn(
  fake: FakeDataplaneApi,
  extra: Partial<DataplaneProviderOptions> = {},
): DataplaneProvider {
  return new DataplaneProvider({
    url: fake.url,
    username: fake.username,
    password: fake.password,
    timeoutMs: 5_000,
    reloadTimeoutMs: 2_000,
    slots: 'config',
    owner: registry,
    logger: pino({ level: 'silent' }),
    ...extra,
  });
}

/** The service's configuration for the fake API, as `createDataplaneProvider` takes it. */
export const startConfigFor = (fake: FakeDataplaneApi): DataplaneConfig => ({
  url: fake.url,
  username: fake.username,
  password: fake.password,
  timeoutMs: 5000,
  reloadTimeoutMs: 2000,
  slots: 'config',
});

/** Cluster `cluster` at `<cluster>.example.com`, one endpoint, claimed at time 0. */
export const claim = (cluster: string, port = 30001, address = '127.0.0.1'): RouteClaim => ({
  cluster,
  host: `${cluster}.example.com`,
  endpoints: [{ address, port }],
  claimedAt: 0,
});

/** The SNI map the fake-API map-routing tests route by (the owner's default name). */
export const SNI_MAP = 'kubebyon-haproxy-adapter.sni.map';

/** Map routing on a loopback bind, without health checks, with a pool of at least `minSlots`. */
export function mapRender(minSlots: number): RenderOptions {
  return {
    ...DEFAULT_RENDER_OPTIONS,
    bind: { address: '127.0.0.1', port: 18443 },
    sniMap: SNI_MAP,
    minSlots,
    healthChecks: false,
  };
}

/** Another tool's objects in the file: they must come back byte for byte after every write of ours. */
export const FOREIGN_TEXT = `global
  stats socket /run/haproxy.sock level admin
  master-worker

defaults unnamed_defaults_1
  mode http
  timeout connect 5s

frontend console_https
  mode http
  bind :8443
  default_backend console

backend console
  mode http
  balance roundrobin
  server web1 10.9.9.9:8443 check
`;
