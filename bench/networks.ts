/**
 * Authorized networks (issue 34) measured end to end against a real HAProxy (and Data Plane API where one is
 * given), with real TLS handshakes carrying SNI from loopback sources the client binds to:
 *
 *   npx tsx bench/networks.ts [--n 5000] [--entries 16] [--changes 200] [--probed 10]
 *                             [--providers haproxy,dataplaneapi] [--haproxy 3.0] [--out bench/results]
 *
 * Per provider, on a fresh HAProxy: N clusters open to all in one request, memory; the same N with a list of
 * `entries` networks each (/32s of 198.18.0.0/15: only map keys to HAProxy), memory; then one list change at
 * a time, round `probed` clusters whose lists also hold one of two loopback sources (127.0.0.10 and up): from
 * the signed `PUT /v1/clusters/{name}?wait=true` to the first handshake from the source the new list adds
 * that reaches the API server, and to the first from the source it drops that is refused; HAProxy's reload
 * count (master `show proc`) around the changes. Every loop has a count and a deadline. Writes
 * <out>/networks.json and networks.md after every provider. Build first (`npm run build`).
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir, totalmem } from 'node:os';
import { join } from 'node:path';
import { sweepTestbedContainers } from '../test/support/haproxy-testbed.js';
import { arg, targetArgs } from './compare/cli.js';
import { startIdentityServers } from './compare/identity.js';
import { startBenchKube } from './compare/kube.js';
import { startTarget } from './compare/targets.js';
import { networksMarkdown } from './networks/report.js';
import { type NetworksResult, runNetworks } from './networks/run.js';

const { source, ns, providers, version, outDir } = targetArgs('5000');
const entries = Number(arg('entries', '16'));
const changes = Number(arg('changes', '200'));
const probed = Number(arg('probed', '10'));
if (probed < 1 || probed > 100)
  throw new Error('--probed must be 1 to 100 (two sources each in 127.0.0.10-211)');
const ADDRESS = '127.0.0.2';

const log = (line: string) => console.log(`[${new Date().toISOString().slice(11, 19)}] ${line}`);
const jsonPath = join(outDir, 'networks.json');
const key = (r: NetworksResult) => `${r.provider}|${r.n}|${r.entries}`;
const results = new Map<string, NetworksResult & { uptime?: string }>(
  (() => {
    try {
      return (JSON.parse(readFileSync(jsonPath, 'utf8')).results ?? []) as NetworksResult[];
    } catch {
      return [];
    }
  })().map((r) => [key(r), r]),
);
const machine = `${cpus().length} x ${cpus()[0]?.model.trim()}, ${Math.round(totalmem() / 2 ** 30)} GiB, Node ${process.version}, HAProxy ${version}`;
const uptime = () =>
  execFileSync('uptime', { encoding: 'utf8' })
    .trim()
    .replace(/^.*load/, 'load');

mkdirSync(outDir, { recursive: true });
const work = mkdtempSync(join(tmpdir(), 'kubebyon-nets-bench-'));
const servers = await startIdentityServers([ADDRESS], 40);
const kube = await startBenchKube(work, ADDRESS);
try {
  for (const provider of providers)
    for (const n of ns) {
      const before = uptime();
      log(`${provider} N=${n}, ${entries} entries each; ${before}`);
      const target = await startTarget(provider, version, source);
      try {
        const r = await runNetworks(target, kube, {
          n,
          entries,
          changes,
          probed,
          servers,
          address: ADDRESS,
          log,
        });
        results.set(key(r), { ...r, uptime: `${before} → ${uptime()}` });
        const all = [...results.values()];
        writeFileSync(
          jsonPath,
          `${JSON.stringify({ machine, date: new Date().toISOString(), results: all }, null, 1)}\n`,
        );
        writeFileSync(join(outDir, 'networks.md'), networksMarkdown(all, machine));
      } finally {
        await target.stop();
        await sweepTestbedContainers();
      }
    }
} finally {
  await kube.stop();
  await servers.close();
  rmSync(work, { recursive: true, force: true });
}
