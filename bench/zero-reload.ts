/**
 * Issue 21's targets, measured end to end against a real HAProxy (and Data Plane API where one is given), with
 * real TLS handshakes carrying SNI to stand-in API servers on loopback:
 *
 *   npx tsx bench/zero-reload.ts [--n 10,1000,5000,20000] [--providers haproxy,dataplaneapi]
 *                                [--changes 40] [--burst 1000] [--stream 1000]
 *                                [--haproxy 3.0] [--out bench/results]
 *
 * Per provider and N, on a fresh HAProxy (map routing, the only layout: `--routing map,rules` measured the
 * per-cluster rules too while KUBEBYON_HAPROXY_ROUTING was a setting; earlier `rules` results are dropped):
 * N clusters in one request (cold), a restart of the service, then one at a time a new cluster, an endpoint
 * move and a delete (webhook with `?wait=true` to the handshake that proves it), a held TLS stream through
 * adds and deletes of others (does it survive, how many HAProxy workers are left), a burst of new clusters
 * within 1 s, and the service's RSS and heap. Every loop has a count and a deadline. Writes <out>/zero-reload.json and zero-reload.md (after every run). Build first
 * (`npm run build`): the service runs as `node dist/cli/main.js serve`.
 */
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir, totalmem } from 'node:os';
import { join } from 'node:path';
import { sweepTestbedContainers } from '../test/support/haproxy-testbed.js';
import { arg, targetArgs } from './compare/cli.js';
import { startIdentityServers } from './compare/identity.js';
import { startBenchKube } from './compare/kube.js';
import { startTarget } from './compare/targets.js';
import { chart, markdown } from './zero-reload/report.js';
import { runZeroReload, type ZeroReloadResult } from './zero-reload/run.js';

const { source, ns, providers, version, outDir } = targetArgs('10,1000,5000,20000');
const changes = Number(arg('changes', '40'));
const burst = Number(arg('burst', '1000'));
const streamChanges = Number(arg('stream', '1000'));
const ADDRESS = '127.0.0.2';

const log = (line: string) => console.log(`[${new Date().toISOString().slice(11, 19)}] ${line}`);
const jsonPath = join(outDir, 'zero-reload.json');
const previous: ZeroReloadResult[] = (() => {
  try {
    const kept: ZeroReloadResult[] = JSON.parse(readFileSync(jsonPath, 'utf8')).results ?? [];
    return kept.filter((r) => r.routing !== 'rules');
  } catch {
    return [];
  }
})();
const key = (r: ZeroReloadResult) => `${r.provider}|${r.routing}|${r.n}`;
const results = new Map(previous.map((r) => [key(r), r]));
const machine = `${cpus().length} x ${cpus()[0]?.model.trim()}, ${Math.round(totalmem() / 2 ** 30)} GiB, Node ${process.version}, HAProxy ${version}`;

mkdirSync(outDir, { recursive: true });
const work = mkdtempSync(join(tmpdir(), 'kubebyon-zr-bench-'));
const servers = await startIdentityServers([ADDRESS], 40);
const kube = await startBenchKube(work, ADDRESS);
try {
  for (const provider of providers)
    for (const n of ns) {
      log(`${provider} N=${n}`);
      const target = await startTarget(provider, version, source);
      try {
        const r = await runZeroReload(target, kube, {
          n,
          changes,
          burst,
          streamChanges,
          servers,
          address: ADDRESS,
          log,
        });
        results.set(key(r), r);
        const all = [...results.values()];
        writeFileSync(
          jsonPath,
          `${JSON.stringify({ machine, date: new Date().toISOString(), results: all }, null, 1)}\n`,
        );
        writeFileSync(join(outDir, 'zero-reload.md'), markdown(all, machine));
        writeFileSync(join(outDir, 'zero-reload.svg'), chart(all));
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
