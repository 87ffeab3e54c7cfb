// Load: 20 concurrent clients send 2,000 signed changes over 20 s to the real service (dist/, its own
// process, KUBEBYON_PROVIDER=haproxy) in front of a real HAProxy test bed (host networking, loopback only).
// Reports acknowledgement latency, passes, reloads (HAProxy's own count), transactions, the service's peak
// RSS, and whether HAProxy ends at exactly the final set. Bounded: 2,000 changes, 20 s, then at most 90 s
// to converge. Writes bench/results/load.md and load.json.
// Run: npm run build && KUBEBYON_TEST_HAPROXY_VERSION=3.0 npx tsx bench/load.ts
import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { cpus, totalmem } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { LOOP } from '../src/reconcile/reconciler-options.js';
import { metric, random, startFaultBed } from '../test/faults/harness.js';
import { sweepTestbedContainers } from '../test/support/haproxy-testbed.js';
import { startServiceProcess } from '../test/support/service-process.js';
import { type NamedTlsServer, sniProbe, startNamedTlsServer } from '../test/support/tls.js';
import { waitFor } from '../test/support/wait.js';
import { useLoopbackTestcontainers } from './compare/cli.js';

useLoopbackTestcontainers();

const CLIENTS = 20;
const CHANGES = 2000;
const DURATION_MS = 20_000;
const CLUSTERS = 300;

type Want = { host: string; server: string } | null;

function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)] as number;
}

function peakRssMiB(pid: number): number {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = Number(/VmHWM:\s+([0-9]+) kB/.exec(status)?.[1] ?? Number.NaN);
  return kb / 1024;
}

async function main(): Promise<void> {
  const repo = join(import.meta.dirname, '..');
  execFileSync('npm', ['run', '--silent', 'build'], { cwd: repo, stdio: 'inherit' });
  await sweepTestbedContainers();
  const servers: NamedTlsServer[] = [];
  for (const name of ['a', 'b', 'c', 'd']) servers.push(await startNamedTlsServer(name));
  const bed = await startFaultBed();
  const service = await startServiceProcess(
    // The loop's debounce and maximum delay are constants now (LOOP; they were settings, 200 and 2000 ms here).
    bed.env({ KUBEBYON_LOG_LEVEL: 'warn' }),
    bed.secret,
    { until: 'readyz' },
  );
  try {
    const rand = random(Number(process.env.KUBEBYON_BENCH_SEED ?? 1));
    const names = Array.from({ length: CLUSTERS }, (_, i) => `load-${String(i).padStart(3, '0')}`);
    // Each client owns its own clusters, so the final set does not depend on how calls interleave.
    const want = new Map<string, Want>();
    const latencies: number[] = [];
    const statuses = new Map<number, number>();
    const loadsBefore = await bed.haproxy.loads();
    const reloadsBefore = await metric(service.url, 'kubebyon_haproxy_adapter_reloads_total', {
      result: 'succeeded',
    });
    const passesBefore = await metric(service.url, 'kubebyon_haproxy_adapter_reconciles_total', {
      result: 'changed',
    });
    const txBefore = await metric(service.url, 'kubebyon_haproxy_adapter_transactions_total', {
      result: 'committed',
    });
    const perClient = CHANGES / CLIENTS;
    const gap = DURATION_MS / perClient;
    const started = Date.now();
    let seq = 0;
    await Promise.all(
      Array.from({ length: CLIENTS }, async (_, c) => {
        const mine = names.filter((_, i) => i % CLIENTS === c);
        for (let i = 0; i < perClient; i++) {
          const due = started + i * gap + (c * gap) / CLIENTS;
          if (due > Date.now()) await sleep(due - Date.now());
          const name = mine[Math.floor(rand() * mine.length)] as string;
          const roll = rand();
          const next: Want =
            roll < 0.15
              ? null
              : {
                  host: `${name}.example.com`,
                  server: servers[Math.floor(rand() * servers.length)]?.name ?? 'a',
                };
          const port = servers.find((s) => s.name === next?.server)?.port;
          const t = performance.now();
          const res =
            next === null
              ? await service.client.request('DELETE', `/v1/clusters/${name}?n=${seq++}`)
              : await service.client.request('PUT', `/v1/clusters/${name}?n=${seq++}`, {
                  control_plane_host: next.host,
                  public_access_mode: 'loadbalancer',
                  node_port: port,
                });
          latencies.push(performance.now() - t);
          statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1);
          if (res.status === 202) want.set(name, next);
        }
      }),
    );
    const streamMs = Date.now() - started;
    const peakDuringStream = peakRssMiB(service.pid);
    // Converged: every cluster applied, and HAProxy runs exactly the final set.
    const finalSet = new Map([...want].filter((e): e is [string, NonNullable<Want>] => e[1] !== null));
    const convergeStart = Date.now();
    await waitFor(
      async () => {
        const routes = await bed.routes();
        return [...routes]
          .map(([h, s]) => `${h}=${s.join()}`)
          .sort()
          .join(';');
      },
      90_000,
      'HAProxy to run the final set',
      {
        ok: (got) =>
          got ===
          [...finalSet.values()]
            .map((w) => `${w.host}=127.0.0.1:${servers.find((s) => s.name === w.server)?.port}`)
            .sort()
            .join(';'),
        everyMs: 500,
      },
    );
    const convergeMs = Date.now() - convergeStart;
    let probesOk = 0;
    for (const w of finalSet.values()) {
      const r = await sniProbe(bed.sniPort, w.host);
      if ('reached' in r && r.reached === w.server) probesOk++;
    }
    const loads = (await bed.haproxy.loads()) - loadsBefore;
    const reloads =
      (await metric(service.url, 'kubebyon_haproxy_adapter_reloads_total', { result: 'succeeded' })) -
      reloadsBefore;
    const passes =
      (await metric(service.url, 'kubebyon_haproxy_adapter_reconciles_total', { result: 'changed' })) -
      passesBefore;
    const transactions =
      (await metric(service.url, 'kubebyon_haproxy_adapter_transactions_total', { result: 'committed' })) -
      txBefore;
    const failedPasses = await metric(service.url, 'kubebyon_haproxy_adapter_reconciles_total', {
      result: 'failed',
    });
    const peak = peakRssMiB(service.pid);
    latencies.sort((x, y) => x - y);
    const seconds = (streamMs + convergeMs) / 1000;
    const result = {
      date: new Date().toISOString().slice(0, 10),
      haproxy: bed.haproxy.version,
      machine: `${cpus().length} x ${cpus()[0]?.model ?? 'cpu'}, ${Math.round(totalmem() / 2 ** 30)} GiB, Node ${process.version}`,
      clients: CLIENTS,
      changes: latencies.length,
      streamSeconds: streamMs / 1000,
      statuses: Object.fromEntries(statuses),
      ackLatencyMs: {
        p50: percentile(latencies, 50),
        p90: percentile(latencies, 90),
        p99: percentile(latencies, 99),
        max: latencies[latencies.length - 1],
      },
      passesThatChanged: passes,
      failedPasses,
      transactions,
      reloadsByService: reloads,
      reloadsByHaproxy: loads,
      debounceMs: LOOP.debounceMs,
      maxDelayMs: LOOP.maxDelayMs,
      reloadsPerSecond: loads / seconds,
      convergeSecondsAfterStream: convergeMs / 1000,
      finalRoutes: finalSet.size,
      sniProbesReached: probesOk,
      peakRssMiB: { duringStream: peakDuringStream, end: peak },
    };
    console.log(JSON.stringify(result, null, 2));
    const md = `# bench/load.ts — ${result.date}

${CLIENTS} concurrent clients, ${result.changes} signed changes (PUT/DELETE over ${CLUSTERS} clusters, 15% deletes)
paced over ${DURATION_MS / 1000} s, against the service (\`dist/\`, own process, \`KUBEBYON_PROVIDER=haproxy\`,
loop debounce ${LOOP.debounceMs} ms, max delay ${LOOP.maxDelayMs} ms) and a real HAProxy ${result.haproxy} test bed, loopback only.
\`npm run build && KUBEBYON_TEST_HAPROXY_VERSION=${result.haproxy} npx tsx bench/load.ts\`

machine: ${result.machine} (shared with other work while measured)

| measure | value |
| --- | --- |
| changes sent / answered 202 | ${result.changes} / ${statuses.get(202) ?? 0} (${JSON.stringify(result.statuses)}) |
| stream duration | ${result.streamSeconds.toFixed(1)} s |
| acknowledgement latency p50 / p90 / p99 / max | ${result.ackLatencyMs.p50.toFixed(1)} / ${result.ackLatencyMs.p90.toFixed(1)} / ${result.ackLatencyMs.p99.toFixed(1)} / ${result.ackLatencyMs.max?.toFixed(1)} ms |
| reconcile passes that changed HAProxy | ${passes} (failed passes: ${failedPasses}) |
| transactions committed | ${transactions} |
| reloads (HAProxy's own "Loading success" count) | ${loads} (service's count: ${reloads}) |
| reloads per second (stream and convergence) | ${result.reloadsPerSecond.toFixed(3)} over ${seconds.toFixed(1)} s (target ≤ 1) |
| converged after the stream ended | ${result.convergeSecondsAfterStream.toFixed(1)} s |
| HAProxy at the final set | ${finalSet.size} routes, exactly the final set (master CLI); ${probesOk}/${finalSet.size} SNI handshakes reached the right server |
| service peak RSS (VmHWM) | ${peak.toFixed(0)} MiB |
`;
    writeFileSync(join(repo, 'bench/results/load.md'), md);
    writeFileSync(join(repo, 'bench/results/load.json'), `${JSON.stringify(result, null, 2)}\n`);
    if (probesOk !== finalSet.size) process.exitCode = 1;
  } finally {
    await service.stop();
    await bed.stop();
    await Promise.all(servers.map((s) => s.close()));
  }
}

await main();
