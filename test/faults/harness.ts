import { execFile, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createServer as createTlsServer } from 'node:tls';
import { promisify } from 'node:util';
import pino from 'pino';
import type { StockHaproxyProvider } from '../../src/providers/haproxy/provider.js';
import { StockHaproxyProvider as Provider } from '../../src/providers/haproxy/provider.js';
import { interpret } from '../../src/registry/ownership.js';
import {
  type HaproxyTestbed,
  haproxyVersionUnderTest,
  startHaproxyTestbed,
  TESTBED_LABEL,
} from '../support/haproxy-testbed.js';
import { freeLoopbackPort } from '../support/ports.js';
import { operatorConfig, stockConfigFor } from '../support/stock-haproxy.js';
import { testKeyPair } from '../support/tls.js';
import { type SignedClient, signedClient } from '../support/webhook-client.js';

const run = promisify(execFile);
const REPO = join(import.meta.dirname, '../..');
export const CLI = join(REPO, 'dist/cli/main.js');

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Polls an async condition until it holds; throws naming `what` (and the last value seen) after `timeoutMs`. */
export async function eventually<T>(
  probe: () => Promise<T>,
  ok: (value: T) => boolean,
  timeoutMs: number,
  what: string,
  everyMs = 200,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: T | undefined;
  for (;;) {
    try {
      last = await probe();
      if (ok(last)) return last;
    } catch (err) {
      last = err as T;
    }
    if (Date.now() > deadline)
      throw new Error(
        `timed out after ${timeoutMs} ms waiting for ${what}; last: ${String(JSON.stringify(last)).slice(0, 2000)}`,
      );
    await sleep(everyMs);
  }
}

/** A seeded PRNG (mulberry32): a failing run can be repeated with KUBEBYON_FAULT_SEED. */
export function random(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export function faultSeed(): number {
  return Number(process.env.KUBEBYON_FAULT_SEED ?? Date.now() % 1_000_000);
}

export interface ServiceChild {
  url: string;
  client: SignedClient;
  pid: number;
  output(): string;
  readonly exited: boolean;
  /** SIGKILL: no cleanup of any kind. Resolves once the process is gone. */
  kill9(): Promise<void>;
  /** SIGTERM (graceful), SIGKILL after 30 s. */
  stop(): Promise<void>;
}

/**
 * The service as it ships: `node dist/cli/main.js serve`, configured only by `env`, on a free loopback port.
 * Resolves once `/healthz` answers.
 */
export async function startServiceChild(
  env: Record<string, string>,
  secret: string,
  listenPort?: number,
): Promise<ServiceChild> {
  if (!existsSync(CLI)) throw new Error(`${CLI} is missing: run npm run build`);
  const port = listenPort ?? (await freeLoopbackPort());
  const child = spawn(process.execPath, [CLI, 'serve'], {
    cwd: REPO,
    env: {
      PATH: process.env.PATH ?? '/usr/bin:/bin',
      HOME: process.env.HOME ?? '/root',
      KUBEBYON_LISTEN_ADDR: `127.0.0.1:${port}`,
      KUBEBYON_WEBHOOK_SECRET: secret,
      KUBEBYON_LOG_LEVEL: 'info',
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout?.on('data', (c: Buffer) => {
    out += c.toString();
  });
  child.stderr?.on('data', (c: Buffer) => {
    out += c.toString();
  });
  let exited = false;
  const gone = new Promise<void>((resolve) =>
    child.on('exit', () => {
      exited = true;
      resolve();
    }),
  );
  const url = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 30_000;
  for (;;) {
    if (exited) throw new Error(`serve exited at start:\n${out.slice(-4000)}`);
    if (
      await fetch(`${url}/healthz`).then(
        (r) => r.ok,
        () => false,
      )
    )
      break;
    if (Date.now() > deadline) {
      child.kill('SIGKILL');
      throw new Error(`serve did not answer /healthz within 30 s:\n${out.slice(-4000)}`);
    }
    await sleep(50);
  }
  return {
    url,
    client: signedClient(url, secret),
    pid: child.pid ?? 0,
    output: () => out,
    get exited() {
      return exited;
    },
    async kill9() {
      if (!exited) child.kill('SIGKILL');
      await gone;
    },
    async stop() {
      if (!exited) child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 30_000);
      await gone;
      clearTimeout(timer);
    },
  };
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

/** One sample of a metric from `/metrics` (0 when the series is absent). */
export async function metric(
  url: string,
  name: string,
  labels: Record<string, string> = {},
): Promise<number> {
  const text = await (await fetch(`${url}/metrics`)).text();
  const want = Object.entries(labels).map(([k, v]) => `${k}="${v}"`);
  for (const line of text.split('\n')) {
    if (!line.startsWith(`${name}{`) && !line.startsWith(`${name} `)) continue;
    if (want.every((w) => line.includes(w))) return Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return 0;
}

export interface FaultBed {
  haproxy: HaproxyTestbed;
  /** Port of the SNI frontend the service creates (KUBEBYON_HAPROXY_BIND_ADDR). */
  sniPort: number;
  stateDir: string;
  secret: string;
  env(extra?: Record<string, string>): Record<string, string>;
  /** A provider of our own, to read what HAProxy runs (owned objects, as interpreted from their tags). */
  reader: StockHaproxyProvider;
  /** Routes HAProxy runs now: host -> the backend's servers as `address:port`, from the master CLI. */
  routes(): Promise<Map<string, string[]>>;
  containerId(): Promise<string>;
  stop(): Promise<void>;
}

/** A stock HAProxy test bed (host networking) with an owned file, and the environment to serve it. */
export async function startFaultBed(o: { stateDir?: string } = {}): Promise<FaultBed> {
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
  const reader = new Provider(stockConfigFor(haproxy), { logger: pino({ level: 'silent' }) });
  return {
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
      KUBEBYON_HAPROXY_MASTER_SOCKET: owned.masterSocket,
      KUBEBYON_HAPROXY_BIN: owned.checkBin,
      KUBEBYON_HAPROXY_BIND_ADDR: `127.0.0.1:${sniPort}`,
      KUBEBYON_PUBLIC_PORT: String(sniPort),
      // Test backends are plain TLS servers that go away between cases: no health checks to wait for.
      KUBEBYON_HAPROXY_HEALTH_CHECKS: 'false',
      KUBEBYON_RECONCILE_DEBOUNCE_MS: '50',
      KUBEBYON_RECONCILE_MAX_DELAY_MS: '500',
      KUBEBYON_STATIC_NODE_ADDRESSES: '127.0.0.1',
      ...extra,
    }),
    async routes() {
      const state = interpret(await reader.readState(AbortSignal.timeout(30_000)));
      const front = state.frontends.find((f) => f.name === 'kubebyon_sni');
      const out = new Map<string, string[]>();
      for (const rule of front?.rules ?? []) {
        const backend = state.backends.find((b) => b.name === rule.backend);
        out.set(rule.host, (backend?.servers ?? []).map((s) => `${s.address}:${s.port}`).sort());
      }
      return out;
    },
    async containerId() {
      const { stdout } = await run('docker', ['ps', '-q', '--filter', `label=${TESTBED_LABEL}`]);
      for (const id of stdout.split('\n').filter(Boolean)) {
        const { stdout: mounts } = await run('docker', [
          'inspect',
          '-f',
          '{{range .Mounts}}{{.Source}} {{end}}',
          id,
        ]);
        if (mounts.split(' ').includes(haproxy.dir)) return id;
      }
      throw new Error(`no container mounts ${haproxy.dir}`);
    },
    async stop() {
      await haproxy.stop();
      if (!o.stateDir) rmSync(stateDir, { recursive: true, force: true });
    },
  };
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
  await eventually(
    () => fetch(`${url}/-/ready`).then((r) => r.status),
    (s) => s === 200,
    30_000,
    `prometheus to start (${log.slice(-500)})`,
  );
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
