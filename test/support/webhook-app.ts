import { mkdtempSync, rmSync } from 'node:fs';
import type { Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import pino from 'pino';
import { DEFAULT_RENDER_OPTIONS } from '../../src/haproxy/render.js';
import { createMetrics, type Metrics } from '../../src/metrics/metrics.js';
import { MemoryProvider } from '../../src/providers/memory/memory-provider.js';
import { Reconciler } from '../../src/reconcile/reconciler.js';
import { OwnedProvider } from '../../src/registry/owned-provider.js';
import { ClusterStore } from '../../src/store/cluster-store.js';
import { StaticTopology, type Topology } from '../../src/topology/topology.js';
import { type AppOptions, createApp, DEFAULT_BODY_TIMEOUT_MS } from '../../src/webhook/app.js';
import { type AuthMode, WebhookAuthenticator } from '../../src/webhook/auth.js';
import type { ConnectionGate, GateLimits } from '../../src/webhook/connection-gate.js';
import type { Readiness } from '../../src/webhook/readiness.js';
import { createWebhookServer, listen, type ServerTimes, serverTimes } from '../../src/webhook/server.js';
import { registry } from './owner.js';
import { type SignedClient, signedClient } from './webhook-client.js';

export const TEST_SECRET = 'test-secret-0123456789';

export interface WebhookAppOptions
  extends Partial<Pick<AppOptions, 'bodyLimitBytes' | 'bodyTimeoutMs' | 'pendingBodyBytes'>> {
  authMode?: AuthMode;
  topology?: Topology;
  /** The provider behind the loop (a fresh MemoryProvider by default). */
  provider?: MemoryProvider;
  /** Keep seen write signatures in `<dir>/state.json.replay`, as the service does. */
  replayFile?: boolean;
  /** Use this folder (and keep it on stop) instead of a fresh temporary one: for restarts. */
  dir?: string;
  /** The HTTP server's bounds on slow clients, instead of the service's. */
  times?: Partial<ServerTimes>;
  /** The bounds on pipelined requests, instead of the service's. */
  gate?: GateLimits;
}

export interface WebhookApp {
  base: string;
  server: Server;
  /** Unanswered requests, and connections closed for what they had waiting. */
  gate: ConnectionGate;
  port: number;
  dir: string;
  store: ClusterStore;
  provider: MemoryProvider;
  reconciler: Reconciler;
  metrics: Metrics;
  client: SignedClient;
  /** Every log line the app wrote, parsed (level debug and up). */
  // biome-ignore lint/suspicious/noExplicitAny: log lines are plain JSON
  logLines: any[];
  /** What /readyz and /v1/readyz report; by default, whether a reconcile has succeeded. */
  readiness: () => Promise<Readiness>;
  stop(): Promise<void>;
}

/** The webhook app on a free loopback port, over a fresh store in a temporary directory. */
export async function startWebhookApp(o: WebhookAppOptions = {}): Promise<WebhookApp> {
  const dir = o.dir ?? mkdtempSync(join(tmpdir(), 'kubebyon-webhook-'));
  const store = await ClusterStore.open(join(dir, 'state.json'));
  const provider = o.provider ?? new MemoryProvider();
  const metrics = createMetrics();
  // biome-ignore lint/suspicious/noExplicitAny: log lines are plain JSON
  const logLines: any[] = [];
  const logger = pino(
    { level: 'debug' },
    new Writable({
      write(chunk, _encoding, done) {
        for (const line of String(chunk).split('\n').filter(Boolean)) logLines.push(JSON.parse(line));
        done();
      },
    }),
  );
  const reconciler = new Reconciler({
    store,
    topology: o.topology ?? new StaticTopology(['10.0.0.1']),
    provider: new OwnedProvider(provider, registry),
    render: DEFAULT_RENDER_OPTIONS,
    metrics,
    logger,
    debounceMs: 10,
    maxDelayMs: 1000,
    resyncIntervalMs: 0,
    retries: 1,
    publicPort: 443,
  });
  const handle = {} as WebhookApp;
  handle.readiness = async () => ({
    ready: reconciler.ready,
    checks: { reconcile: { ok: reconciler.ready } },
  });
  const app = createApp({
    store,
    reconciler,
    metrics,
    logger,
    auth: await WebhookAuthenticator.open({
      mode: o.authMode ?? 'hmac',
      secret: TEST_SECRET,
      replayWindowSeconds: 300,
      ...(o.replayFile ? { replayFile: join(dir, 'state.json.replay') } : {}),
    }),
    waitTimeoutMs: 5000,
    bodyLimitBytes: o.bodyLimitBytes ?? 64 * 1024,
    ...(o.bodyTimeoutMs === undefined ? {} : { bodyTimeoutMs: o.bodyTimeoutMs }),
    ...(o.pendingBodyBytes === undefined ? {} : { pendingBodyBytes: o.pendingBodyBytes }),
    readiness: () => handle.readiness(),
    version: 'test',
  });
  // The server the service runs, with its bounds on slow and pipelining clients.
  const { server, gate } = createWebhookServer(
    app,
    { ...serverTimes(o.bodyTimeoutMs ?? DEFAULT_BODY_TIMEOUT_MS), ...o.times },
    o.gate,
  );
  await listen(server, '127.0.0.1', 0);
  const address = server.address();
  if (!address || typeof address === 'string') throw new Error('no address');
  const base = `http://127.0.0.1:${address.port}`;
  return Object.assign(handle, {
    base,
    server,
    gate,
    port: address.port,
    dir,
    store,
    provider,
    reconciler,
    metrics,
    client: signedClient(base, TEST_SECRET),
    logLines,
    async stop() {
      await reconciler.stop(100);
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
      if (!o.dir) rmSync(dir, { recursive: true, force: true });
    },
  });
}
