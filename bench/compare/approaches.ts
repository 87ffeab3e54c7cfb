import { execFile } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import axios, { type AxiosInstance } from 'axios';
import pino from 'pino';
import type { DesiredConfig, RawState } from '../../src/haproxy/model.js';
import { DEFAULT_RENDER_OPTIONS, type RenderOptions, renderDesired } from '../../src/haproxy/render.js';
import { ConcurrentChangeError } from '../../src/model/errors.js';
import { serverSlotName } from '../../src/naming/names.js';
import { plan } from '../../src/plan/plan.js';
import { DataplaneProvider } from '../../src/providers/dataplaneapi/provider.js';
import { MasterCli } from '../../src/providers/haproxy/master-cli.js';
import { renderOwnedFile } from '../../src/providers/haproxy/owned-file.js';
import { StockHaproxyProvider } from '../../src/providers/haproxy/provider.js';
import { parseReloadAnswer, parseShowProc } from '../../src/providers/haproxy/runtime-text.js';
import type { Provider, ProviderTraffic } from '../../src/providers/provider.js';
import { OwnedProvider } from '../../src/registry/owned-provider.js';
import { resolveRoutes } from '../../src/routes/route.js';
import { DPAPI_USER } from '../../test/support/dataplaneapi-testbed.js';
import { legacyBackendName } from '../../test/support/legacy-rules.js';
import { ownerTags, registry } from '../../test/support/owner.js';
import { waitFor } from '../../test/support/wait.js';
import { type Counts, zeroCounts } from './counting-proxy.js';
import type { BenchKube } from './kube.js';
import { type BenchService, benchServiceEnv, type Resources, startService } from './service.js';
import type { Target } from './targets.js';

const run = promisify(execFile);

export type ApproachName = 'ours' | 'naive' | 'rewrite';

export interface Cluster {
  name: string;
  host: string;
  nodePort: number;
}

/**
 * One way of keeping HAProxy in line with the clusters. Every call resolves once the approach considers
 * the change applied; the scenario measures routability itself, with real TLS handshakes.
 */
export interface Approach {
  readonly name: ApproachName;
  putAll(clusters: Cluster[]): Promise<void>;
  upsert(cluster: Cluster): Promise<void>;
  /** Every route's endpoint moves to `address` (one node's address changed). */
  moveNode(address: string): Promise<void>;
  resync(): Promise<void>;
  /** Resolves once nothing is in flight any more (ours: the service's pass has finished). */
  settle(): Promise<void>;
  /** Changes that arrive after `deadline` (epoch ms) are dropped: a bound on slow baselines. */
  dropAfter(deadline: number): void;
  /** Changes dropped so far by `dropAfter`. */
  dropped(): number;
  /** Requests and bytes sent to HAProxy (or its API) so far. */
  counts(): Promise<Counts>;
  /** Plans applied (transactions, raw pushes, file rewrites). */
  applies(): Promise<number>;
  resources?(): Resources;
  /** V8 heap in use now, in MB (ours only). */
  heapUsedMb?(): Promise<number | undefined>;
  /** Seconds spent so far in each phase of the service's passes (ours only): where the time goes. */
  phases?(): Promise<Record<string, number>>;
  stop(): Promise<void>;
}

export function renderOptions(sniPort: number): RenderOptions {
  return {
    ...DEFAULT_RENDER_OPTIONS,
    bind: { address: '127.0.0.1', port: sniPort },
    healthChecks: false,
  };
}

function desired(clusters: readonly Cluster[], address: string, render: RenderOptions): DesiredConfig {
  const claims = clusters.map((c) => ({
    cluster: c.name,
    host: c.host,
    endpoints: [{ address, port: c.nodePort }],
    claimedAt: 0,
  }));
  return renderDesired(resolveRoutes(claims).routes, render);
}

const body = (c: Cluster) => ({
  control_plane_host: c.host,
  public_access_mode: 'loadbalancer',
  node_port: c.nodePort,
});

// ---- ours: the service, built, as its own process --------------------------------------------------------

export async function startOurs(
  target: Target,
  kube: BenchKube,
  extraEnv: Record<string, string> = {},
): Promise<Approach> {
  const dir = mkdtempSync(join(tmpdir(), 'kubebyon-bench-'));
  const secret = `bench-${Math.random().toString(36).slice(2)}-secret`;
  const svc: BenchService = await startService(
    { ...benchServiceEnv(target, kube.kubeconfig, dir), ...extraEnv },
    secret,
  );
  const metric = async (name: string) => (await svc.metrics()).get(name) ?? 0;
  const expectOk = async (p: Promise<{ status: number; body: string }>, what: string) => {
    const res = await p;
    if (res.status !== 200) throw new Error(`${what}: ${res.status} ${res.body.slice(0, 500)}`);
  };
  // A write signed in the same second as an identical one would be refused as a replay: never the case here.
  const callRetrying = async (method: string, path: string, b?: unknown) => {
    for (let attempt = 1; ; attempt++) {
      const res = await svc.call(method, path, b);
      if (res.status !== 503 || attempt >= 20) return res;
      await sleep(50 * attempt);
    }
  };
  return {
    name: 'ours',
    heapUsedMb: async () => {
      const bytes = (await svc.metrics()).get('nodejs_heap_size_used_bytes');
      return bytes === undefined ? undefined : Math.round(bytes / 1e5) / 10;
    },
    phases: async () => {
      const m = await svc.metrics();
      const prefix = 'kubebyon_haproxy_adapter_reconcile_phase_duration_seconds_sum{phase="';
      return Object.fromEntries(
        [...m.entries()]
          .filter(([k]) => k.startsWith(prefix))
          .map(([k, v]) => [k.slice(prefix.length, -2), v]),
      );
    },
    putAll: (clusters) =>
      expectOk(
        callRetrying('PUT', '/v1/clusters?wait=true', {
          clusters: clusters.map((c) => ({ name: c.name, ...body(c) })),
        }),
        'PUT /v1/clusters',
      ),
    upsert: (c) => expectOk(callRetrying('PUT', `/v1/clusters/${c.name}?wait=true`, body(c)), c.name),
    moveNode: (address) => kube.setNodeAddress(address),
    resync: () => expectOk(callRetrying('POST', '/v1/reconcile?wait=true'), 'POST /v1/reconcile'),
    async settle() {
      // Quiet once the passes and the writes to HAProxy stay still for a second and no request is in flight.
      // Not every request: the revision watch reads HAProxy every 500 ms (LOOP.watchMs), so the request
      // count never stays still. The writes: the API's non-GET requests, or the stock provider's files.
      const deadline = Date.now() + 600_000;
      let last = '';
      let stillSince = Date.now();
      while (Date.now() < deadline) {
        const m = await svc.metrics();
        const now = [
          target.dataplane ? target.dataplane.proxy.counts().writes : stockFiles(target),
          [...m.entries()]
            .filter(
              ([k]) =>
                k.startsWith('kubebyon_haproxy_adapter_reconciles_total') ||
                k.startsWith('kubebyon_haproxy_adapter_reconcile_duration_seconds_count'),
            )
            .map(([, v]) => v)
            .join(','),
          target.dataplane?.proxy.inFlight() ?? 0,
        ].join('|');
        if (now !== last) {
          last = now;
          stillSince = Date.now();
        } else if (Date.now() - stillSince > 1_000 && (target.dataplane?.proxy.inFlight() ?? 0) === 0) {
          return;
        }
        await sleep(200);
      }
    },
    dropAfter() {},
    dropped: () => 0,
    async counts() {
      if (target.dataplane) return target.dataplane.proxy.counts();
      const m = await svc.metrics();
      return {
        ...zeroCounts(),
        requests: m.get(`kubebyon_haproxy_adapter_provider_requests_total{provider="haproxy"}`) ?? 0,
        writes: -1,
        bytesSent:
          m.get(`kubebyon_haproxy_adapter_provider_bytes_total{provider="haproxy",direction="sent"}`) ?? 0,
        bytesReceived:
          m.get(`kubebyon_haproxy_adapter_provider_bytes_total{provider="haproxy",direction="received"}`) ??
          0,
      };
    },
    applies: () => metric('kubebyon_haproxy_adapter_transactions_total{result="committed"}'),
    resources: () => svc.resources(),
    async stop() {
      await svc.stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** The stock provider's files as they are on disk now (each one's name, size and modification time). */
function stockFiles(target: Target): string {
  const owned = target.stock?.ownedFile;
  if (!owned) return '';
  const dir = dirname(owned);
  return readdirSync(dir)
    .filter((f) => join(dir, f) === owned || f.endsWith('.map'))
    .sort()
    .map((f) => {
      const st = statSync(join(dir, f));
      return `${f}:${st.size}:${st.mtimeMs}`;
    })
    .join(',');
}

// ---- baselines: one apply per change, in order, each carrying exactly the changes up to its own -------

abstract class PerChange implements Approach {
  abstract readonly name: ApproachName;
  protected clusters = new Map<string, Cluster>();
  protected address: string;
  private queue: Promise<unknown> = Promise.resolve();
  private deadline = Number.POSITIVE_INFINITY;
  private drops = 0;
  protected applied = 0;
  protected readonly render: RenderOptions;

  constructor(
    protected readonly target: Target,
    address: string,
  ) {
    this.address = address;
    this.render = renderOptions(target.sniPort);
  }

  /** Applies the desired objects for this snapshot of the clusters. */
  protected abstract apply(config: DesiredConfig, resync: boolean): Promise<void>;

  private enqueue(resync = false): Promise<void> {
    // This change's view of the clusters, rendered when its turn comes.
    const clusters = [...this.clusters.values()];
    const address = this.address;
    const next = this.queue.then(async () => {
      if (Date.now() > this.deadline) {
        this.drops++;
        return;
      }
      await this.apply(desired(clusters, address, this.render), resync);
    });
    this.queue = next.catch(() => {});
    return next;
  }

  putAll(clusters: Cluster[]) {
    this.clusters = new Map(clusters.map((c) => [c.name, c]));
    return this.enqueue();
  }
  upsert(c: Cluster) {
    this.clusters.set(c.name, c);
    return this.enqueue();
  }
  moveNode(address: string) {
    this.address = address;
    return this.enqueue();
  }
  resync() {
    return this.enqueue(true);
  }
  async settle() {
    await this.queue;
  }
  dropAfter(deadline: number) {
    this.deadline = deadline;
    if (deadline === Number.POSITIVE_INFINITY) this.drops = 0;
  }
  dropped() {
    return this.drops;
  }
  abstract counts(): Promise<Counts>;
  async applies() {
    return this.applied;
  }
  abstract stop(): Promise<void>;
}

/** Counts master-CLI commands and file bytes of the stock-HAProxy baselines. */
class LocalTraffic implements ProviderTraffic {
  c = zeroCounts();
  request() {
    this.c.requests++;
  }
  bytes(direction: 'sent' | 'received', n: number) {
    if (direction === 'sent') this.c.bytesSent += n;
    else this.c.bytesReceived += n;
  }
}

/**
 * naive: the service's own provider, driven once per change with no debounce and no coalescing: read, plan,
 * apply, for every webhook in turn (what a per-event controller does).
 */
class Naive extends PerChange {
  readonly name = 'naive' as const;
  private readonly inner: Provider;
  /** The provider behind the registry, as the service runs it. */
  private readonly provider: OwnedProvider;
  private readonly traffic = new LocalTraffic();

  constructor(target: Target, address: string) {
    super(target, address);
    const logger = pino({ level: 'silent' });
    if (target.dataplane) {
      this.inner = new DataplaneProvider({
        url: target.dataplane.proxy.url,
        username: DPAPI_USER,
        password: target.dataplane.password,
        timeoutMs: 600_000,
        reloadTimeoutMs: 600_000,
        owner: registry,
        logger,
      });
    } else if (target.stock) {
      this.inner = new StockHaproxyProvider(target.stock, {
        logger,
        owner: registry,
        traffic: this.traffic,
      });
    } else throw new Error('no provider for the target');
    this.provider = new OwnedProvider(this.inner, registry);
  }

  protected async apply(config: DesiredConfig): Promise<void> {
    for (let attempt = 1; ; attempt++) {
      try {
        const signal = AbortSignal.timeout(600_000);
        const current = await this.provider.read(signal);
        const p = plan(config, current.state);
        if (p.operations.length === 0) return;
        await this.provider.apply(p, current, signal);
        this.applied++;
        return;
      } catch (err) {
        if (!(err instanceof ConcurrentChangeError) || attempt >= 5) throw err;
      }
    }
  }

  async counts() {
    if (this.target.dataplane) return this.target.dataplane.proxy.counts();
    return { ...this.traffic.c, writes: -1 };
  }

  /** Its start-up reads (the API's document, a first state), as the service does them before any change. */
  async warm(): Promise<void> {
    await this.provider.read(AbortSignal.timeout(600_000), { fresh: true });
  }

  async stop() {
    await this.provider.close();
  }
}

/**
 * rewrite: render the whole configuration and push it on every change. Data Plane API: the whole file
 * through `POST /configuration/raw?force_reload=true`. Stock HAProxy: write the owned file, `haproxy -c`
 * (as Debian's systemd unit does before a reload), `reload` on the master CLI. A resync renders, compares
 * with what is deployed, and pushes only when it differs.
 */
class Rewrite extends PerChange {
  readonly name = 'rewrite' as const;
  private readonly traffic = new LocalTraffic();
  private readonly api: AxiosInstance | undefined;
  private readonly cli: MasterCli | undefined;
  private version: number | undefined;
  /** The last text pushed, and the file as the API stored it. */
  private pushed: string | undefined;
  private stored: string | undefined;

  constructor(target: Target, address: string) {
    super(target, address);
    if (target.dataplane) {
      this.api = axios.create({
        baseURL: `${target.dataplane.proxy.url}/v3`,
        auth: { username: DPAPI_USER, password: target.dataplane.password },
        validateStatus: () => true,
        timeout: 600_000,
        proxy: false,
        maxBodyLength: Number.POSITIVE_INFINITY,
        maxContentLength: Number.POSITIVE_INFINITY,
        transformResponse: (d) => d,
      });
    }
    if (target.stock) this.cli = new MasterCli(target.stock.masterSocket, 600_000, this.traffic);
  }

  protected async apply(config: DesiredConfig, resync: boolean): Promise<void> {
    if (this.api) return this.pushRaw(config, resync, this.api);
    return this.pushFile(config, resync);
  }

  private async pushRaw(config: DesiredConfig, resync: boolean, api: AxiosInstance): Promise<void> {
    const text = `${this.target.baseConfig}\n${dataplaneText(config)}`;
    // The API stores the file in its own form (sections reordered): compare with what it said it stored.
    if (resync && this.stored !== undefined && this.pushed === text) {
      const current = await api.get('/services/haproxy/configuration/raw');
      if (withoutApiHeader(String(current.data)) === this.stored) return;
    }
    for (let attempt = 1; ; attempt++) {
      if (this.version === undefined)
        this.version = Number((await api.get('/services/haproxy/configuration/version')).data);
      const res = await api.post(
        `/services/haproxy/configuration/raw?version=${this.version}&force_reload=true`,
        text,
        { headers: { 'Content-Type': 'text/plain' } },
      );
      const v = Number(res.headers['configuration-version']);
      this.version = Number.isFinite(v) && v > 0 ? v : undefined;
      if (res.status === 201 || res.status === 202) {
        this.applied++;
        this.pushed = text;
        this.stored = withoutApiHeader(String(res.data));
        return;
      }
      if (res.status !== 409 || attempt >= 3)
        throw new Error(`raw push: ${res.status} ${String(res.data).slice(0, 500)}`);
      this.version = undefined;
    }
  }

  private async pushFile(config: DesiredConfig, resync: boolean): Promise<void> {
    const stock = this.target.stock;
    const cli = this.cli;
    if (!stock || !cli) throw new Error('no stock HAProxy');
    const text = renderOwnedFile(rawOf(config));
    if (resync && readFileSync(stock.ownedFile, 'utf8') === text) return;
    const tmp = `${stock.ownedFile}.rewrite`;
    writeFileSync(tmp, text);
    this.traffic.bytes('sent', Buffer.byteLength(text));
    try {
      await run(stock.haproxyBin, ['-c', ...stock.checkFiles.flatMap((f) => ['-f', f]), '-f', tmp], {
        maxBuffer: 64 * 1024 * 1024,
      });
    } catch (err) {
      rmSync(tmp, { force: true });
      throw new Error(
        `haproxy -c refused the rewrite: ${String((err as { stderr?: string }).stderr ?? err)}`,
      );
    }
    renameSync(tmp, stock.ownedFile);
    const signal = AbortSignal.timeout(600_000);
    const before = parseShowProc(await cli.send('show proc', signal));
    const answer = parseReloadAnswer(await cli.send('reload', signal, 600_000).catch(() => ''));
    if (answer.status === 'failed') throw new Error(`reload failed: ${answer.alerts.join('; ')}`);
    // 2.6 answers nothing to `reload`: the master's reload counter says when it is done.
    const proc = await waitFor(
      () => cli.send('show proc', signal).then(parseShowProc),
      600_000,
      'the reload to finish',
      { ok: (p) => p.reloads > before.reloads, everyMs: 20 },
    );
    if (proc.failed > before.failed) throw new Error('reload failed');
    this.applied++;
  }

  async counts() {
    if (this.target.dataplane) return this.target.dataplane.proxy.counts();
    return { ...this.traffic.c, writes: -1 };
  }

  async stop() {}
}

export async function startBaseline(
  name: 'naive' | 'rewrite',
  target: Target,
  address: string,
): Promise<Approach> {
  if (name === 'rewrite') return new Rewrite(target, address);
  const naive = new Naive(target, address);
  await naive.warm();
  return naive;
}

/**
 * What a tool that rewrites the whole configuration on every change writes for the routes: one backend and one
 * `use_backend ... if { req.ssl_sni -i <host> }` rule per cluster (the plainest layout, the one this service
 * wrote before map routing), named as the service named them.
 */
function perCluster(d: DesiredConfig) {
  return d.routing.routes.map((r) => ({ route: r, backend: legacyBackendName(r.cluster) }));
}

/** The owned file's objects for a desired configuration, rewritten whole (see `perCluster`). */
function rawOf(d: DesiredConfig): RawState {
  const f = d.frontend;
  const routes = perCluster(d);
  return {
    frontends: [
      {
        name: f.name,
        bind: f.bind,
        inspectDelayMs: f.inspectDelayMs,
        acceptsTlsHello: true,
        defaultBackend: f.defaultBackend,
        rules: routes.map(({ route, backend }) => ({ backend, host: route.host, tags: ownerTags() })),
        tags: ownerTags(),
      },
    ],
    backends: routes.map(({ route, backend }) => ({
      name: backend,
      balance: d.routing.balance,
      servers: route.servers.map((s, i) => ({
        name: serverSlotName(i + 1),
        address: s.address,
        port: s.port,
        check: s.check,
        tags: ownerTags(),
      })),
      tags: ownerTags(route.cluster),
    })),
  };
}

/** The same sections as plain haproxy.cfg text (the values were validated when the routes were). */
function dataplaneText(d: DesiredConfig): string {
  const f = d.frontend;
  const routes = perCluster(d);
  const lines = [
    `frontend ${f.name}`,
    '  mode tcp',
    `  bind ${f.bind.address}:${f.bind.port}`,
    `  tcp-request inspect-delay ${f.inspectDelayMs}`,
    '  tcp-request content accept if { req.ssl_hello_type 1 }',
    ...routes.map(({ route, backend }) => `  use_backend ${backend} if { req.ssl_sni -i ${route.host} }`),
    ...(f.defaultBackend ? [`  default_backend ${f.defaultBackend}`] : []),
    '',
  ];
  for (const { route, backend } of routes) {
    lines.push(`backend ${backend}`, '  mode tcp', `  balance ${d.routing.balance}`);
    route.servers.forEach((s, i) => {
      lines.push(`  server ${serverSlotName(i + 1)} ${s.address}:${s.port}${s.check ? ' check' : ''}`);
    });
    lines.push('');
  }
  return lines.join('\n');
}

/** The API adds its own header lines (`# _version=N`, `# _md5hash=...`) to the file it stores. */
function withoutApiHeader(text: string): string {
  return text
    .split('\n')
    .filter((l) => !/^# _/.test(l))
    .join('\n')
    .trim();
}
