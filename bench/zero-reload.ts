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
import { arg, targetArgs } from './compare/cli.js';
import { BENCH_ADDRESS, eachTarget, benchLog as log } from './compare/each-target.js';
import { chart, markdown } from './zero-reload/report.js';
import { runZeroReload, type ZeroReloadResult } from './zero-reload/run.js';

const args = targetArgs('10,1000,5000,20000');
const changes = Number(arg('changes', '40'));
const burst = Number(arg('burst', '1000'));
const streamChanges = Number(arg('stream', '1000'));

await eachTarget<ZeroReloadResult>({
  args,
  name: 'zero-reload',
  key: (r) => `${r.provider}|${r.routing}|${r.n}`,
  // Results of the per-cluster `rules` layout (retired) are not kept.
  keep: (r) => r.routing !== 'rules',
  run(target, n, { kube, servers }) {
    log(`${target.provider} N=${n}`);
    return runZeroReload(target, kube, {
      n,
      changes,
      burst,
      streamChanges,
      servers,
      address: BENCH_ADDRESS,
      log,
    });
  },
  report: (all, machine) => ({ 'zero-reload.md': markdown(all, machine), 'zero-reload.svg': chart(all) }),
});
