/**
 * What the per-source stick table costs in memory when full: the SNI frontend's table as the adapter writes it
 * (`src/haproxy/edge.ts`, default settings: `type ipv6 ...
 * store conn_cur,conn_rate(10s)`) filled through the runtime API (`set table ... key <k> data.conn_cur 0`)
 * with keys from the IPv6 documentation prefix 2001:db8::/32 (table entries only: no traffic), the worker's
 * RSS read before and after. Also what HAProxy does when the table is full (entries purged, `used`).
 */
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { type Edge, edgeLines } from '../../src/haproxy/edge.js';
import { DEFAULT_RENDER_OPTIONS, renderDesired } from '../../src/haproxy/render.js';
import {
  type HaproxyVersion,
  startHaproxyTestbed,
  unixSocketCommand,
} from '../../test/support/haproxy-testbed.js';
import { freeLoopbackPort } from '../../test/support/ports.js';
import { parseTables } from './stats.js';

export interface TableMemoryResult {
  version: HaproxyVersion;
  size: number;
  inserted: number;
  used: number;
  rssEmptyKiB: number;
  rssFullKiB: number;
  bytesPerEntry: number;
}

/** The guard's lines that make and count the per-source table (the rest needs the maps and touches no table). */
function tableLines(edge: Edge): string[] {
  const lines = edgeLines(edge, 5000, { sniMap: '-' });
  return lines.filter((l) => /^(maxconn |stick-table |tcp-request connection )/.test(l));
}

export async function tableMemory(version: HaproxyVersion): Promise<TableMemoryResult> {
  const edge = renderDesired([], DEFAULT_RENDER_OPTIONS).frontend.edge;
  if (!edge?.perSource) throw new Error('no per-source table by default');
  const size = edge.perSource.tableSize;
  const port = await freeLoopbackPort();
  const config = [
    'global',
    '  stats socket /etc/kubebyon/admin.sock mode 600 level admin',
    'defaults',
    '  mode tcp',
    '  timeout connect 5s',
    '  timeout client 30s',
    '  timeout server 30s',
    'frontend kubebyon_sni',
    `  bind 127.0.0.1:${port}`,
    ...tableLines(edge).map((l) => `  ${l}`),
    '  default_backend closed',
    'backend closed',
    '',
  ].join('\n');
  const haproxy = await startHaproxyTestbed(config, version);
  try {
    const sock = join(haproxy.dir, 'admin.sock');
    const cli = (c: string) => unixSocketCommand(sock, c);
    const rss = async () => {
      const pid = /^([0-9]+)\s+worker/m.exec(await haproxy.masterCli('show proc'))?.[1];
      const { execFile } = await import('node:child_process');
      const out = await new Promise<string>((resolve, reject) =>
        execFile(
          'docker',
          ['exec', haproxy.containerId, '/bin/busybox', 'cat', `/proc/${pid}/status`],
          (e, o) => (e ? reject(e) : resolve(o)),
        ),
      );
      return Number(/VmRSS:\s+([0-9]+)/.exec(out)?.[1]);
    };
    await sleep(500);
    const rssEmptyKiB = await rss();
    const total = Math.round(size * 1.1);
    const perLine = 120;
    for (let i = 0; i < total; i += perLine) {
      const cmds: string[] = [];
      for (let j = i; j < Math.min(total, i + perLine); j++)
        cmds.push(
          `set table kubebyon_sni key 2001:db8:${(j >> 16).toString(16)}::${(j & 0xffff).toString(16)} data.conn_cur 0`,
        );
      await cli(cmds.join(';'));
    }
    await sleep(500);
    const used = parseTables(await cli('show table')).find((t) => t.name === 'kubebyon_sni')?.used ?? 0;
    const rssFullKiB = await rss();
    return {
      version,
      size,
      inserted: total,
      used,
      rssEmptyKiB,
      rssFullKiB,
      bytesPerEntry: Math.round(((rssFullKiB - rssEmptyKiB) * 1024) / Math.max(1, used)),
    };
  } finally {
    await haproxy.stop();
  }
}
