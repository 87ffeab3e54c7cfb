/**
 * The attack bed with the Data Plane API provider as the writer: HAProxy (test-bed image plus the API binary,
 * `KUBEBYON_TEST_DATAPLANEAPI_BIN`) with the operator's global/defaults, and the same two clusters applied
 * through `DataplaneProvider` with the default settings. Only "after" exists here: the API writes what the
 * provider sends, the guard included. `guardCheck` compares the frontend HAProxy runs with the lines the stock
 * provider writes for the same settings (`edgeLines`).
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import pino from 'pino';
import { edgeLines, isEdgeLine } from '../../src/haproxy/edge.js';
import { DEFAULT_RENDER_OPTIONS, type RenderOptions, renderDesired } from '../../src/haproxy/render.js';
import { refusalsBackendFor } from '../../src/naming/names.js';
import { plan } from '../../src/plan/plan.js';
import { DataplaneProvider } from '../../src/providers/dataplaneapi/provider.js';
import { OwnedProvider } from '../../src/registry/owned-provider.js';
import { resolveRoutes } from '../../src/routes/route.js';
import {
  type DataplaneSource,
  DPAPI_USER,
  startDataplaneTestbed,
} from '../../test/support/dataplaneapi-testbed.js';
import type { HaproxyVersion } from '../../test/support/haproxy-testbed.js';
import { registry } from '../../test/support/owner.js';
import { freeLoopbackPort } from '../../test/support/ports.js';
import { type AttackBed, attackClaims, workerProc } from './bed.js';

/** docker/compose/haproxy.cfg's settings, with the stats socket the API needs and a named defaults. */
function operatorConfig(): string {
  return [
    'global',
    '  stats socket /etc/kubebyon/admin.sock mode 600 level admin expose-fd listeners',
    '  log stderr format short local0 info',
    '  hard-stop-after 30s',
    '',
    'defaults base',
    '  mode tcp',
    '  log global',
    '  timeout connect 5s',
    '  timeout client 1h',
    '  timeout server 1h',
    '',
  ].join('\n');
}

export interface GuardCheck {
  /** The guard's lines in the frontend HAProxy runs (tags stripped). */
  written: string[];
  /** What the stock provider writes for the same settings and the same map files. */
  stock: string[];
  /** Lines in one and not the other, after reading `size 100k`/`expire 1m` as the numbers they are. */
  differences: string[];
  sameOrder: boolean;
}

/** The stick-table line with its size and expiry as numbers (the API writes `size 100k`, `expire 1m`). */
function normalTable(line: string): string {
  const m = /^stick-table type (\S+) size ([0-9]+)(k|m)? expire ([0-9]+)(ms|s|m)? store (\S+)$/.exec(line);
  if (!m) return line;
  const size = Number(m[2]) * (m[3] === 'k' ? 1024 : m[3] === 'm' ? 1024 ** 2 : 1);
  const expireMs = Number(m[4]) * ({ ms: 1, s: 1000, m: 60_000 }[m[5] ?? 'ms'] ?? 1);
  return `stick-table type ${m[1]} size ${size} expire ${expireMs}ms store ${m[6]}`;
}

export function guardCheck(config: string, render: RenderOptions): GuardCheck {
  const section = config.split(/\n(?=\S)/).find((s) => /^frontend kubebyon_sni\b/.test(s)) ?? '';
  const body = section
    .split('\n')
    .slice(1)
    .map((l) => l.replace(/\s+#.*$/, '').trim())
    .filter((l) => l.length > 0);
  const written = body.filter(isEdgeLine);
  const file = (re: RegExp) => written.map((l) => re.exec(l)?.[1]).find((x) => x !== undefined) ?? '';
  const files = {
    sniMap: file(/set-var\(txn\.kb_slot\) var\(txn\.kb_sni\),map\((\S+)\)/),
    allowMap: file(/^acl kb_restricted var\(txn\.kb_slot\),map\((\S+)\)/),
  };
  const desired = renderDesired([], render).frontend.edge;
  if (!desired) throw new Error('no guard rendered');
  const stock = edgeLines(desired, render.inspectDelayMs, files);
  const a = written.map(normalTable);
  const b = stock.map(normalTable);
  const differences = [
    ...a.filter((l) => !b.includes(l)).map((l) => `only written: ${l}`),
    ...b.filter((l) => !a.includes(l)).map((l) => `only stock: ${l}`),
  ];
  return { written, stock, differences, sameOrder: a.join('\n') === b.join('\n') };
}

export async function startDataplaneAttackBed(
  source: DataplaneSource,
  version: HaproxyVersion,
  backendPort: number,
): Promise<AttackBed & { guard: GuardCheck }> {
  const port = await freeLoopbackPort();
  const tb = await startDataplaneTestbed(source, version, operatorConfig());
  const provider = new DataplaneProvider({
    url: tb.url,
    username: DPAPI_USER,
    password: tb.password,
    timeoutMs: 30_000,
    reloadTimeoutMs: 30_000,
    owner: registry,
    logger: pino({ level: 'silent' }),
  });
  try {
    const render: RenderOptions = { ...DEFAULT_RENDER_OPTIONS, bind: { address: '127.0.0.1', port } };
    const signal = () => AbortSignal.timeout(120_000);
    const writer = new OwnedProvider(provider, registry);
    const current = await writer.read(signal(), { fresh: true });
    const p = plan(renderDesired(resolveRoutes(attackClaims(backendPort)).routes, render), current.state, {
      grow: 'when_needed',
    });
    await writer.apply(p, current, signal());
    const config = readFileSync(join(tb.dir, 'haproxy.cfg'), 'utf8');
    const guard = guardCheck(config, render);
    const mapPath = /map\((\S+\.sni\.map)\)/.exec(guard.written.join('\n'))?.[1] ?? '';
    // The refusals table must be there for the guard to count refusals (`show table` below).
    if (!config.includes(`backend ${refusalsBackendFor()}`)) throw new Error('no refusals backend written');
    const worker = await workerProc(tb.containerId, tb.masterCli);
    const bed: AttackBed & { guard: GuardCheck } = {
      version,
      provider: 'dataplaneapi',
      containerId: tb.containerId,
      port,
      ownedToday: config,
      owned: config,
      mapPath,
      guard,
      cli: (command) => tb.masterCli(`@1 ${command}`),
      async load(c) {
        if (c !== 'after')
          throw new Error('the Data Plane API bed runs only what the provider writes ("after")');
      },
      async reloadWith() {
        throw new Error('the Data Plane API bed is written by the provider only');
      },
      ...worker,
      async stop() {
        await provider.close();
        await tb.stop();
      },
    };
    return bed;
  } catch (err) {
    await provider.close().catch(() => {});
    await tb.stop();
    throw err;
  }
}
