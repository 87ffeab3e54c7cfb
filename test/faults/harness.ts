import { execFile, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { createServer as createTlsServer } from 'node:tls';
import { promisify } from 'node:util';
import pino from 'pino';
import { afterAll, afterEach, beforeAll, describe } from 'vitest';
import type { HaproxyState } from '../../src/haproxy/model.js';
import { DataplaneProvider } from '../../src/providers/dataplaneapi/provider.js';
import { LEDGER_FILE } from '../../src/providers/dataplaneapi/sweep.js';
import type { StockHaproxyProvider } from '../../src/providers/haproxy/provider.js';
import { StockHaproxyProvider as Provider } from '../../src/providers/haproxy/provider.js';
import {
  DPAPI_USER,
  dataplaneSource,
  foreignConfig,
  startDataplaneTestbed,
} from '../support/dataplaneapi-testbed.js';
import {
  type HaproxyTestbed,
  type HaproxyVersion,
  haproxyVersionUnderTest,
  startHaproxyTestbed,
  TESTBED_LABEL,
} from '../support/haproxy-testbed.js';
import { interpret, registry } from '../support/owner.js';
import { freeLoopbackPort } from '../support/ports.js';
import type { ServiceProcess } from '../support/service-process.js';
import { operatorConfig, stockConfigFor } from '../support/stock-haproxy.js';
import { type NamedTlsServer, startNamedTlsServer, testKeyPair } from '../support/tls.js';
import { waitFor } from '../support/wait.js';

const run = promisify(execFile);

/** A seeded PRNG: a failing run is repeated with the seed it printed (KUBEBYON_FAULT_SEED in faults). */
export { random } from '../support/random.js';

export function faultSeed(): number {
  return Number(process.env.KUBEBYON_FAULT_SEED ?? Date.now() % 1_000_000);
}

export async function readyz(
  url: string,
): Promise<{ status: number; body: { ready: boolean; checks: Record<string, { ok: boolean }> } }> {
  const res = await fetch(`${url}/readyz`);
  return {
    status: res.status,
    body: (await res.json()) as { ready: boolean; checks: Record<string, { ok: boolean }> },
  };
}

/** A metric from `/metrics`: the sum of its series that carry `labels` (0 when none does). */
export async function metric(
  url: string,
  name: string,
  labels: Record<string, string> = {},
): Promise<number> {
  const text = await (await fetch(`${url}/metrics`)).text();
  const want = Object.entries(labels).map(([k, v]) => `${k}="${v}"`);
  let sum = 0;
  for (const line of text.split('\n')) {
    if (!line.startsWith(`${name}{`) && !line.startsWith(`${name} `)) continue;
    if (want.every((w) => line.includes(w))) sum += Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return sum;
}

/** The provider a fault run drives: `KUBEBYON_TEST_FAULTS_PROVIDER`, `haproxy` (stock HAProxy) by default. */
export type FaultProvider = 'haproxy' | 'dataplaneapi';

export function faultProviderUnderTest(): FaultProvider {
  const p = process.env.KUBEBYON_TEST_FAULTS_PROVIDER ?? 'haproxy';
  if (p !== 'haproxy' && p !== 'dataplaneapi')
    throw new Error(`KUBEBYON_TEST_FAULTS_PROVIDER must be haproxy or dataplaneapi, got ${p}`);
  return p;
}

/**
 * Why a fault case does not run in this run, or undefined when it does. `provider` cases run with either
 * provider (the Data Plane API one only where an API is given); `stock` cases do not depend on the provider,
 * or drive the stock one directly, and run in the stock run only.
 */
export function faultSkipReason(kind: 'provider' | 'stock'): string | undefined {
  const provider = faultProviderUnderTest();
  if (provider === 'haproxy') return undefined;
  if (kind === 'stock')
    return 'provider-independent (or drives the stock provider itself): runs in the stock-HAProxy run only';
  if (!dataplaneSource())
    return 'KUBEBYON_TEST_FAULTS_PROVIDER=dataplaneapi needs a Data Plane API: set KUBEBYON_TEST_DATAPLANEAPI_BIN (a dataplaneapi binary) or KUBEBYON_TEST_DATAPLANEAPI_IMAGE';
  return undefined;
}

/** A fault suite, or, when this run cannot run it, the same suite skipped with the reason in its title. */
export function describeFault(kind: 'provider' | 'stock', title: string, body: () => void): void {
  const why = faultSkipReason(kind);
  if (why === undefined) describe(title, body);
  else describe.skip(`${title} [skipped: ${why}]`, body);
}

/** The bed of one fault run, whichever provider drives HAProxy. */
export interface FaultBed {
  provider: FaultProvider;
  version: HaproxyVersion;
  /** Port of the SNI frontend the service creates (KUBEBYON_HAPROXY_BIND_ADDR). */
  sniPort: number;
  stateDir: string;
  secret: string;
  env(extra?: Record<string, string>): Record<string, string>;
  /** Routes HAProxy runs now: host -> the backend's servers as `address:port` (owned objects, from their tags). */
  routes(): Promise<Map<string, string[]>>;
  /**
   * Ids of the transactions open in the Data Plane API now: none, ever (the provider opens none; those a
   * release before it left are swept at start); always none with the stock provider.
   */
  openTransactions(): Promise<string[]>;
  /**
   * The ids a transaction ledger beside the state file lists (releases before this one kept one; this one
   * removes it at start): none.
   */
  ledger(): string[];
  /** Folders where an interrupted write would leave a `.tmp` file behind. */
  writeDirs: string[];
  /**
   * Makes what the service drives unreachable, HAProxy itself running on: with the stock provider its master
   * socket is moved away; with the Data Plane API the API's process is killed (SIGKILL). `restore()` undoes it.
   */
  cut(): Promise<void>;
  restore(): Promise<void>;
  /**
   * `docker restart -t 0` of HAProxy's container. With the Data Plane API, which dies with it, the API is then
   * started again as its supervisor would; nothing is done to the service.
   */
  restart(): Promise<void>;
  containerId(): Promise<string>;
  stop(): Promise<void>;
}

/** The stock-HAProxy bed: also the test bed itself and a provider of our own to read it. */
export interface StockFaultBed extends FaultBed {
  provider: 'haproxy';
  haproxy: HaproxyTestbed;
  /**
   * A provider of our own, to read what HAProxy runs (`routes`), or to drive it directly (behind the
   * registry: `ownedBy(reader)`).
   */
  reader: StockHaproxyProvider;
}

export interface FaultBedOptions {
  stateDir?: string;
  provider?: FaultProvider;
}

function routesOf(owned: HaproxyState): Map<string, string[]> {
  const front = owned.frontends.find((f) => f.name === 'kubebyon_sni');
  const out = new Map<string, string[]>();
  const serversOf = (name: string) =>
    (owned.backends.find((b) => b.name === name)?.servers ?? []).map((s) => `${s.address}:${s.port}`).sort();
  for (const rule of front?.rules ?? []) out.set(rule.host, serversOf(rule.backend));
  // Map routing: the map HAProxy runs, each host to its slot's servers.
  const map = owned.maps?.find((m) => m.name === front?.sniMap);
  for (const [host, backend] of map?.entries ?? []) out.set(host, serversOf(backend));
  return out;
}

const SERVICE_DEFAULTS = {
  // Test backends are plain TLS servers that go away between cases: no health checks to wait for.
  KUBEBYON_HAPROXY_HEALTH_CHECKS: 'false',
  KUBEBYON_STATIC_NODE_ADDRESSES: '127.0.0.1',
};

/**
 * A real HAProxy test bed (host networking, loopback ports) driven by `provider` (default: the run's,
 * KUBEBYON_TEST_FAULTS_PROVIDER), and the environment to serve it: with `haproxy`, a stock HAProxy with an
 * owned file; with `dataplaneapi`, HAProxy with the given Data Plane API beside it.
 */
export function startFaultBed(o?: FaultBedOptions & { provider?: 'haproxy' }): Promise<StockFaultBed>;
export function startFaultBed(o: FaultBedOptions): Promise<FaultBed>;
export async function startFaultBed(o: FaultBedOptions = {}): Promise<FaultBed> {
  return (o.provider ?? 'haproxy') === 'haproxy' ? startStockBed(o) : startDataplaneBed(o);
}

/** A stock HAProxy test bed (host networking) with an owned file, and the environment to serve it. */
async function startStockBed(o: FaultBedOptions): Promise<StockFaultBed> {
  const sniPort = await freeLoopbackPort();
  const haproxy = await startHaproxyTestbed(
    operatorConfig(await freeLoopbackPort(), await freeLoopbackPort()),
    haproxyVersionUnderTest(),
    { ownedFile: true },
  );
  const owned = haproxy.owned;
  if (!owned) throw new Error('no owned file');
  const stateDir = o.stateDir ?? mkdtempSync(join(tmpdir(), 'kubebyon-faults-'));
  const secret = randomBytes(24).toString('hex');
  const reader = new Provider(stockConfigFor(haproxy), {
    logger: pino({ level: 'silent' }),
    owner: registry,
  });
  const socket = owned.masterSocket;
  const containerId = () => testbedContainer(haproxy.dir);
  return {
    provider: 'haproxy',
    version: haproxy.version,
    haproxy,
    sniPort,
    stateDir,
    secret,
    reader,
    env: (extra = {}) => ({
      KUBEBYON_PROVIDER: 'haproxy',
      KUBEBYON_STATE_FILE: join(stateDir, 'clusters.json'),
      KUBEBYON_HAPROXY_OWNED_FILE: owned.path,
      KUBEBYON_HAPROXY_CHECK_FILES: owned.checkFiles.join(','),
      KUBEBYON_HAPROXY_MASTER_SOCKET: socket,
      KUBEBYON_HAPROXY_BIN: owned.checkBin,
      KUBEBYON_HAPROXY_BIND_ADDR: `127.0.0.1:${sniPort}`,
      KUBEBYON_PUBLIC_PORT: String(sniPort),
      ...SERVICE_DEFAULTS,
      ...extra,
    }),
    routes: () => routesNow(reader),
    openTransactions: async () => [],
    ledger: () => [],
    writeDirs: [dirname(owned.path), stateDir],
    async cut() {
      renameSync(socket, `${socket}.away`);
    },
    async restore() {
      renameSync(`${socket}.away`, socket);
    },
    async restart() {
      await run('docker', ['restart', '-t', '0', await containerId()]);
    },
    containerId,
    async stop() {
      await haproxy.stop();
      if (!o.stateDir) rmSync(stateDir, { recursive: true, force: true });
    },
  };
}

/** HAProxy with the given Data Plane API beside it (one container, host networking). */
async function startDataplaneBed(o: FaultBedOptions): Promise<FaultBed> {
  const source = dataplaneSource();
  if (!source) throw new Error(faultSkipReason('provider') ?? 'no Data Plane API given');
  const sniPort = await freeLoopbackPort();
  // The operator's part: a console frontend and its TLS backend (nothing listens behind it).
  const tb = await startDataplaneTestbed(
    source,
    haproxyVersionUnderTest(),
    foreignConfig({ consolePort: await freeLoopbackPort(), consoleBackendPort: await freeLoopbackPort() }),
  );
  const stateDir = o.stateDir ?? mkdtempSync(join(tmpdir(), 'kubebyon-faults-'));
  const secret = randomBytes(24).toString('hex');
  // `KUBEBYON_TEST_DATAPLANE_SLOTS=storage`: the slot backends in the API's general storage.
  const slots = process.env.KUBEBYON_TEST_DATAPLANE_SLOTS === 'storage' ? 'storage' : 'config';
  // A reader of our own (its reads write nothing; no ledger).
  const reader = new DataplaneProvider({
    url: tb.url,
    username: DPAPI_USER,
    password: tb.password,
    timeoutMs: 30_000,
    reloadTimeoutMs: 10_000,
    owner: registry,
    logger: pino({ level: 'silent' }),
    slots,
  });
  const ledgerFile = join(stateDir, LEDGER_FILE);
  return {
    provider: 'dataplaneapi',
    version: haproxyVersionUnderTest(),
    sniPort,
    stateDir,
    secret,
    env: (extra = {}) => ({
      KUBEBYON_PROVIDER: 'dataplaneapi',
      KUBEBYON_STATE_FILE: join(stateDir, 'clusters.json'),
      KUBEBYON_DATAPLANE_URL: tb.url,
      KUBEBYON_DATAPLANE_USERNAME: DPAPI_USER,
      KUBEBYON_DATAPLANE_PASSWORD: tb.password,
      KUBEBYON_DATAPLANE_TIMEOUT_MS: '10000',
      // 2.6 reloads by signal: a reload it refuses is seen as no new worker within this time.
      KUBEBYON_HAPROXY_RELOAD_TIMEOUT_MS: '10000',
      KUBEBYON_HAPROXY_BIND_ADDR: `127.0.0.1:${sniPort}`,
      KUBEBYON_PUBLIC_PORT: String(sniPort),
      KUBEBYON_DATAPLANE_SLOTS: slots,
      ...SERVICE_DEFAULTS,
      ...extra,
    }),
    routes: () => routesNow(reader),
    async openTransactions() {
      const res = await tb.api.get('/services/haproxy/transactions?status=in_progress');
      if (res.status !== 200)
        throw new Error(`listing transactions: ${res.status} ${JSON.stringify(res.data)}`);
      return (res.data as Array<{ id: string }>).map((t) => t.id).sort();
    },
    ledger() {
      if (!existsSync(ledgerFile)) return [];
      return ((JSON.parse(readFileSync(ledgerFile, 'utf8')) as { open: string[] }).open ?? []).sort();
    },
    writeDirs: [stateDir],
    cut: () => tb.stopApi('KILL'),
    restore: () => tb.startApi(),
    restart: () => tb.restart(),
    containerId: async () => tb.containerId,
    async stop() {
      await reader.close();
      await tb.stop();
      if (!o.stateDir) rmSync(stateDir, { recursive: true, force: true });
    },
  };
}

/**
 * What HAProxy runs now, read in full by `reader` and interpreted by the registry: the provider's own read,
 * not the registry's (which would settle: write the files, where the service under test must).
 */
async function routesNow(reader: Provider | DataplaneProvider): Promise<Map<string, string[]>> {
  const { raw } = await reader.read(AbortSignal.timeout(30_000));
  return routesOf(interpret(raw));
}

async function testbedContainer(dir: string): Promise<string> {
  const { stdout } = await run('docker', ['ps', '-q', '--filter', `label=${TESTBED_LABEL}`]);
  for (const id of stdout.split('\n').filter(Boolean)) {
    const { stdout: mounts } = await run('docker', [
      'inspect',
      '-f',
      '{{range .Mounts}}{{.Source}} {{end}}',
      id,
    ]);
    if (mounts.split(' ').includes(dir)) return id;
  }
  throw new Error(`no container mounts ${dir}`);
}

export async function docker(...args: string[]): Promise<string> {
  return (await run('docker', args)).stdout;
}

export interface PortTlsServer {
  name: string;
  port: number;
  close(): Promise<void>;
}

/**
 * A TLS server on 127.0.0.1 at a free port inside Kubernetes' NodePort range (30000-32767), answering every
 * connection with its name: it stands in for a vCluster API server behind a NodePort.
 */
export async function startNodePortTlsServer(name: string): Promise<PortTlsServer> {
  for (let attempt = 0; attempt < 50; attempt++) {
    const port = 30000 + Math.floor(Math.random() * 2768);
    const server = createTlsServer(testKeyPair(), (socket) => socket.end(`${name}\n`));
    server.on('tlsClientError', () => {});
    const ok = await new Promise<boolean>((resolve) => {
      server.once('error', () => resolve(false));
      server.listen(port, '127.0.0.1', () => resolve(true));
    });
    if (ok) return { name, port, close: () => new Promise((r) => server.close(() => r())) };
  }
  throw new Error('no free port in the NodePort range');
}

export interface Prometheus {
  url: string;
  /** The alerts Prometheus holds now, by name, with their state (pending, firing). */
  alerts(): Promise<Array<{ name: string; state: string }>>;
  query(expr: string): Promise<number | undefined>;
  stop(): Promise<void>;
}

/**
 * A real Prometheus (Debian's package) on loopback, scraping `target` every second and evaluating the
 * project's alert rules every second: proves that an alert fires on the metrics the service really exports.
 */
export async function startPrometheus(target: string, ruleFile: string): Promise<Prometheus> {
  const dir = mkdtempSync(join(tmpdir(), 'kubebyon-prometheus-'));
  const port = await freeLoopbackPort();
  const config = join(dir, 'prometheus.yml');
  writeFileSync(
    config,
    `global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n  - ${ruleFile}\nscrape_configs:\n  - job_name: adapter\n    static_configs:\n      - targets: ['${target}']\n`,
  );
  const child = spawn(
    'prometheus',
    [
      `--config.file=${config}`,
      `--storage.tsdb.path=${join(dir, 'data')}`,
      `--web.listen-address=127.0.0.1:${port}`,
      '--log.level=warn',
    ],
    { stdio: ['ignore', 'ignore', 'pipe'] },
  );
  let log = '';
  child.stderr?.on('data', (c: Buffer) => {
    log += c.toString();
  });
  const gone = new Promise<void>((resolve) => child.on('exit', () => resolve()));
  const url = `http://127.0.0.1:${port}`;
  await waitFor(() => fetch(`${url}/-/ready`).then((r) => r.status), 30_000, 'prometheus to start', {
    ok: (s) => s === 200,
  }).catch((err: Error) => {
    throw new Error(`${err.message}\n${log.slice(-500)}`);
  });
  return {
    url,
    async alerts() {
      const body = (await (await fetch(`${url}/api/v1/alerts`)).json()) as {
        data: { alerts: Array<{ labels: { alertname: string }; state: string }> };
      };
      return body.data.alerts.map((a) => ({ name: a.labels.alertname, state: a.state }));
    },
    async query(expr) {
      const body = (await (await fetch(`${url}/api/v1/query?query=${encodeURIComponent(expr)}`)).json()) as {
        data: { result: Array<{ value: [number, string] }> };
      };
      const v = body.data.result[0]?.value[1];
      return v === undefined ? undefined : Number(v);
    },
    async stop() {
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
      await gone;
      clearTimeout(timer);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/**
 * A fault file's fixture: the stand-in API server `alpha` and a bed for `provider`, started before the file's
 * tests and stopped after them; the service a test keeps in `service` is stopped after each test.
 */
export function faultFixture(provider: FaultProvider) {
  const f = {
    bed: undefined as unknown as FaultBed,
    alpha: undefined as unknown as NamedTlsServer,
    service: undefined as ServiceProcess | undefined,
    /** Reloads HAProxy behind the service's back: SIGUSR2 to the master (PID 1 of its container). */
    reloadByHand: async () => docker('kill', '--signal', 'USR2', await f.bed.containerId()),
  };
  beforeAll(async () => {
    f.alpha = await startNamedTlsServer('alpha');
    f.bed = await startFaultBed({ provider });
  });
  afterEach(async () => {
    await f.service?.stop();
    f.service = undefined;
  });
  afterAll(async () => {
    await f.bed?.stop();
    await f.alpha?.close();
  });
  return f;
}
