/**
 * Issue 32: what the service asks the Data Plane API when it restarts over N clusters, and how long each
 * request takes. One fresh target, N clusters in one request, a stop, then a start with every API request
 * logged (`BENCH_API_LOG`, see `compare/counting-proxy.ts`) until ready and one `POST /v1/reconcile?wait=true`:
 *
 *   KUBEBYON_TEST_DATAPLANEAPI_BIN=… npx tsx bench/dp-restart.ts [--n 5000] [--settle-ms 0]
 *        [--log /tmp/dp-restart.jsonl]
 *
 * `BENCH_SERVICE_DIR` runs another checkout's build (as in `zero-reload-compare.ts`). Prints the time to ready,
 * the time of the reconcile, and the requests grouped by method and path shape (count, total ms, max ms).
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { arg, targetArgs } from './compare/cli.js';
import { startIdentityServers } from './compare/identity.js';
import { startBenchKube } from './compare/kube.js';
import { startService } from './compare/service.js';
import { startTarget } from './compare/targets.js';
import { benchRunEnv } from './zero-reload/run.js';

const { source, version } = targetArgs('5000');
const n = Number(arg('n', '5000'));
const logFile = arg('log', '/tmp/dp-restart.jsonl');
// How long the service runs after the PUT before it is stopped (zero-reload.ts stops it once routable).
const settleMs = Number(arg('settle-ms', '0'));
const ADDRESS = '127.0.0.2';
const log = (line: string) => console.log(`[${new Date().toISOString().slice(11, 19)}] ${line}`);

const work = mkdtempSync(join(tmpdir(), 'kubebyon-dp-restart-'));
const servers = await startIdentityServers([ADDRESS], 40);
const kube = await startBenchKube(work, ADDRESS);
const target = await startTarget('dataplaneapi', version, source);
try {
  const dir = mkdtempSync(join(work, 'svc-'));
  const secret = `dr-${Math.random().toString(36).slice(2)}-secret`;
  const env = benchRunEnv(target, kube.kubeconfig, dir);
  let svc = await startService(env, secret);
  const call = async (method: string, path: string, body?: unknown) => {
    const res = await svc.call(method, path, body);
    if (res.status < 200 || res.status >= 300)
      throw new Error(`${method} ${path}: ${res.status} ${res.body.slice(0, 300)}`);
  };
  const clusters = Array.from({ length: n }, (_, i) => ({
    name: `c${String(i).padStart(5, '0')}`,
    control_plane_host: `c${String(i).padStart(5, '0')}.dr.example.com`,
    public_access_mode: 'loadbalancer',
    node_port: servers.ports[i % servers.ports.length],
  }));
  const t0 = performance.now();
  await call('PUT', '/v1/clusters?wait=true', { clusters });
  log(`PUT of ${n} clusters applied in ${Math.round(performance.now() - t0)} ms`);
  await new Promise((r) => setTimeout(r, settleMs));
  await svc.stop();
  writeFileSync(logFile, '');
  process.env.BENCH_API_LOG = logFile;
  const t1 = performance.now();
  svc = await startService(env, secret);
  const readyMs = performance.now() - t1;
  log(`ready after ${Math.round(readyMs)} ms`);
  const t2 = performance.now();
  await call('POST', '/v1/reconcile?wait=true');
  log(
    `reconcile after ready: ${Math.round(performance.now() - t2)} ms; restart → reconciled ${Math.round(performance.now() - t1)} ms`,
  );
  delete process.env.BENCH_API_LOG;
  await svc.stop();
  const lines = readFileSync(logFile, 'utf8')
    .trim()
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l));
  const groups = new Map<string, { count: number; ms: number; max: number; bytes: number }>();
  for (const r of lines) {
    const shape = `${r.method} ${String(r.path)
      .replace(/\/[a-z0-9_]*\d{3,}[a-z0-9_.%]*/gi, '/{x}')
      .replace(/version=\d+/, 'version=V')} ${r.status}`;
    const g = groups.get(shape) ?? { count: 0, ms: 0, max: 0, bytes: 0 };
    g.count++;
    g.ms += r.ms;
    g.max = Math.max(g.max, r.ms);
    g.bytes += r.bytes;
    groups.set(shape, g);
  }
  for (const [shape, g] of [...groups].sort((a, b) => b[1].ms - a[1].ms))
    console.log(
      `${String(g.count).padStart(6)} ${String(g.ms).padStart(8)} ms total ${String(g.max).padStart(7)} ms max ${String(g.bytes).padStart(10)} B  ${shape}`,
    );
} finally {
  await target.stop();
  await kube.stop();
  await servers.close();
  rmSync(work, { recursive: true, force: true });
}
