import pino from 'pino';
import { DEFAULT_RENDER_OPTIONS, type RenderOptions } from '../../src/haproxy/render.js';
import { createMetrics } from '../../src/metrics/metrics.js';
import type { ClusterRecord } from '../../src/model/cluster.js';
import { readCapabilities } from '../../src/providers/dataplaneapi/capability.js';
import {
  DataplaneProvider,
  type DataplaneProviderOptions,
} from '../../src/providers/dataplaneapi/provider.js';
import { descriptionToTags, metadataToTags } from '../../src/providers/dataplaneapi/tags.js';
import type { Provider } from '../../src/providers/provider.js';
import { type PassReport, runPass } from '../../src/reconcile/pass.js';
import { OwnedProvider } from '../../src/registry/owned-provider.js';
import { StaticTopology } from '../../src/topology/topology.js';
import {
  type DataplaneSource,
  type DataplaneTestbed,
  DPAPI_USER,
  dataplaneSource,
  foreignConfig,
  startDataplaneTestbed,
} from '../support/dataplaneapi-testbed.js';
import { type HaproxyVersion, haproxyVersionUnderTest } from '../support/haproxy-testbed.js';
import { isOwned, registry } from '../support/owner.js';
import { freeLoopbackPort } from '../support/ports.js';
import { type NamedTlsServer, startNamedTlsServer } from '../support/tls.js';
import { waitFor } from '../support/wait.js';

export const source: DataplaneSource | undefined = dataplaneSource();

export function versionUnderTest(): HaproxyVersion {
  return haproxyVersionUnderTest();
}

export const silent = pino({ level: 'silent' });

export interface Harness {
  tb: DataplaneTestbed;
  /** The console's TLS backend (the foreign default backend) and three cluster backends. */
  console: NamedTlsServer;
  alpha: NamedTlsServer;
  beta: NamedTlsServer;
  gamma: NamedTlsServer;
  sniPort: number;
  render: RenderOptions;
  provider(options?: Partial<DataplaneProviderOptions>): DataplaneProvider;
  close(): Promise<void>;
}

export async function startHarness(): Promise<Harness> {
  if (!source) throw new Error('no Data Plane API given');
  const [consoleTls, alpha, beta, gamma] = await Promise.all(
    ['console', 'alpha', 'beta', 'gamma'].map((n) => startNamedTlsServer(n)),
  );
  if (!consoleTls || !alpha || !beta || !gamma) throw new Error('TLS servers did not start');
  const tb = await startDataplaneTestbed(
    source,
    versionUnderTest(),
    foreignConfig({ consolePort: await freeLoopbackPort(), consoleBackendPort: consoleTls.port }),
  );
  const sniPort = await freeLoopbackPort();
  const providers: DataplaneProvider[] = [];
  return {
    tb,
    console: consoleTls,
    alpha,
    beta,
    gamma,
    sniPort,
    // Map routing (the only layout), with the default SNI and allow maps of the default owner.
    render: {
      ...DEFAULT_RENDER_OPTIONS,
      minSlots: 4,
      bind: { address: '127.0.0.1', port: sniPort },
      defaultBackend: 'console_tls',
    },
    provider(options = {}) {
      const p = new DataplaneProvider({
        url: tb.url,
        username: DPAPI_USER,
        password: tb.password,
        timeoutMs: 30_000,
        reloadTimeoutMs: 8_000,
        owner: registry,
        logger: silent,
        ...options,
      });
      providers.push(p);
      return p;
    },
    async close() {
      for (const p of providers) await p.close();
      await tb.stop();
      for (const s of [consoleTls, alpha, beta, gamma]) await s.close();
    },
  };
}

export function record(name: string, host: string, port: number): ClusterRecord {
  return { name, host, target: { nodePort: port }, claimedAt: 1, updatedAt: 1 };
}

/** One reconcile pass as the service runs it: one attempt, read and planned again on concurrent changes. */
export function pass(
  h: Harness,
  provider: Provider,
  records: ClusterRecord[],
  render: RenderOptions = h.render,
  retries = 5,
): Promise<PassReport> {
  return runPass({
    records,
    topology: new StaticTopology(['127.0.0.1']),
    provider: new OwnedProvider(provider, registry),
    render,
    retries,
    signal: AbortSignal.timeout(120_000),
    logger: silent,
    metrics: createMetrics(),
  });
}

/** Whether the API under test reads back general storage files, as the provider decides it (`capability.ts`). */
export async function readsGeneralFiles(h: Harness): Promise<boolean> {
  const check = readCapabilities((await h.tb.api.get('/specification_openapiv3')).data);
  return check.ok && check.capabilities.generalFiles;
}

/**
 * Removes every object the service owns, in one foreign transaction (another tool's), its slots files and
 * the map files nothing names any more: HAProxy back to its fixture.
 */
export async function resetToForeign(tb: DataplaneTestbed): Promise<void> {
  const api = tb.api;
  const version = (await api.get('/services/haproxy/configuration/version')).data as number;
  type Section = { name: string; metadata?: unknown; description?: unknown };
  const fronts = (await api.get('/services/haproxy/configuration/frontends')).data as Section[];
  const backs = (await api.get('/services/haproxy/configuration/backends')).data as Section[];
  // Ours as the provider writes it: tags in metadata (v3.2+) or in the description (v3.0).
  const ours = (o: Section) => {
    const meta = metadataToTags(o.metadata);
    return isOwned(Object.keys(meta).length > 0 ? meta : descriptionToTags(o.description));
  };
  const f = fronts.filter(ours);
  const b = backs.filter(ours);
  // The slots file (`KUBEBYON_DATAPLANE_SLOTS=storage`) and any other file HAProxy loads from the storage.
  const general = ((await api.get('/services/haproxy/storage/general')).data ?? []) as Array<{
    storage_name?: string;
  }>;
  const files = general.flatMap((g) => (g.storage_name?.endsWith('.cfg') ? [g.storage_name] : []));
  if (f.length === 0 && b.length === 0 && files.length === 0) return deleteUnusedMaps(tb);
  for (const name of files) {
    const gone = await api.delete(`/services/haproxy/storage/general/${name}`);
    if (gone.status >= 300) throw new Error(`reset failed: ${gone.status} ${JSON.stringify(gone.data)}`);
  }
  const tx = (await api.post(`/services/haproxy/transactions?version=${version}`)).data as { id: string };
  for (const x of f)
    await api.delete(`/services/haproxy/configuration/frontends/${x.name}?transaction_id=${tx.id}`);
  for (const x of b)
    await api.delete(`/services/haproxy/configuration/backends/${x.name}?transaction_id=${tx.id}`);
  const loads = tb.loadCount();
  const done = await api.put(`/services/haproxy/transactions/${tx.id}?force_reload=true`);
  if (done.status >= 300) throw new Error(`reset failed: ${done.status} ${JSON.stringify(done.data)}`);
  // 2.6 reloads by signal, after the API has answered: wait until HAProxy has loaded the reset.
  await waitFor(() => tb.loadCount() > loads, 10_000, 'HAProxy to load the reset configuration', {
    everyMs: 25,
  });
  await deleteUnusedMaps(tb);
}

/** Map files of the API's storage that the configuration no longer names (ours, once our frontend is gone). */
async function deleteUnusedMaps(tb: DataplaneTestbed): Promise<void> {
  const text = await rawConfig(tb);
  const stored = ((await tb.api.get('/services/haproxy/storage/maps')).data ?? []) as Array<{
    storage_name?: string;
  }>;
  for (const m of stored) {
    const name = m.storage_name;
    if (!name || text.includes(name)) continue;
    const gone = await tb.api.delete(`/services/haproxy/storage/maps/${name}`);
    if (gone.status >= 300)
      throw new Error(`map ${name} not deleted: ${gone.status} ${JSON.stringify(gone.data)}`);
  }
}

/** The text of each top-level section of a haproxy.cfg, keyed by its header line's first two words. */
export function sections(raw: string): Map<string, string> {
  const out = new Map<string, string>();
  let key: string | undefined;
  let lines: string[] = [];
  const flush = () => {
    if (key) out.set(key, lines.join('\n'));
  };
  for (const line of raw.split('\n')) {
    if (/^[a-z]/.test(line)) {
      flush();
      key = line.split(/\s+/).slice(0, 2).join(' ');
      lines = [line];
    } else if (key && !line.startsWith('#')) {
      lines.push(line);
    }
  }
  flush();
  return out;
}

export async function rawConfig(tb: DataplaneTestbed): Promise<string> {
  const res = await tb.api.get('/services/haproxy/configuration/raw', { responseType: 'text' });
  return String(res.data);
}

export async function openTransactions(tb: DataplaneTestbed): Promise<string[]> {
  const res = await tb.api.get('/services/haproxy/transactions?status=in_progress');
  return (res.data as Array<{ id: string }>).map((t) => t.id);
}
