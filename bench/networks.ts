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
 * the signed `PUT /v1/clusters/{name}?wait=true` being sent (probes from both sources run from then on)
 * to the first handshake from the source the new list adds that reaches the API server (when the server saw
 * HAProxy's connection, and when the client's handshake was done), to the first ClientHello from the source it
 * drops that is refused, and to the answer (the acknowledgement); HAProxy's reload
 * count (master `show proc`) around the changes. Every loop has a count and a deadline. Writes
 * <out>/networks.json and networks.md after every provider. Build first (`npm run build`).
 */
import { arg, targetArgs } from './compare/cli.js';
import { BENCH_ADDRESS, eachTarget, loadAverage, benchLog as log } from './compare/each-target.js';
import { networksMarkdown } from './networks/report.js';
import { type NetworksResult, runNetworks } from './networks/run.js';

const args = targetArgs('5000');
const entries = Number(arg('entries', '16'));
const changes = Number(arg('changes', '200'));
const probed = Number(arg('probed', '10'));
if (probed < 1 || probed > 100)
  throw new Error('--probed must be 1 to 100 (two sources each in 127.0.0.10-211)');

await eachTarget<NetworksResult & { uptime?: string }>({
  args,
  name: 'networks',
  key: (r) => `${r.provider}|${r.n}|${r.entries}`,
  async run(target, n, { kube, servers }) {
    const before = loadAverage();
    log(`${target.provider} N=${n}, ${entries} entries each; ${before}`);
    const r = await runNetworks(target, kube, {
      n,
      entries,
      changes,
      probed,
      servers,
      address: BENCH_ADDRESS,
      log,
    });
    return { ...r, uptime: `${before} → ${loadAverage()}` };
  },
  report: (all, machine) => ({ 'networks.md': networksMarkdown(all, machine) }),
});
