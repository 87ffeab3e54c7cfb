/**
 * The service against a full rewrite and a naive per-change apply, side by side in one run, each against its
 * own fresh real HAProxy (and Data Plane API) on loopback, with real TLS backends checked by SNI:
 *
 *   npx tsx bench/compare.ts [--n 10,100,1000,5000] [--providers haproxy,dataplaneapi]
 *                            [--approaches ours,rewrite,naive] [--changes 20] [--burst 200] [--cap 120]
 *                            [--haproxy 3.0] [--out bench/results] [--no-build] [--report-only]
 *
 * The Data Plane API provider runs when KUBEBYON_TEST_DATAPLANEAPI_BIN or _IMAGE is set; the stock one always.
 * Writes <out>/compare.json, compare.md and compare.svg (rewritten after every run, so a long run that is
 * stopped keeps what it measured). Every loop is bounded: `--cap` seconds for a slow approach's burst and
 * endpoint move, fixed deadlines elsewhere. Not part of the test suite.
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, release, tmpdir, totalmem } from 'node:os';
import { join } from 'node:path';
import { sweepTestbedContainers } from '../test/support/haproxy-testbed.js';
import { type Approach, type ApproachName, startBaseline, startOurs } from './compare/approaches.js';
import { arg, list, REPO, targetArgs } from './compare/cli.js';
import { startIdentityServers } from './compare/identity.js';
import { type BenchKube, startBenchKube } from './compare/kube.js';
import { chart, markdown, type Report } from './compare/report.js';
import { type RunResult, runScenario } from './compare/scenario.js';
import { startTarget, type Target } from './compare/targets.js';

const { source, ns, providers, version, outDir } = targetArgs('10,100,1000,5000');
const approaches = list(arg('approaches', 'ours,rewrite,naive')) as ApproachName[];
const changes = Number(arg('changes', '20'));
const burst = Number(arg('burst', '200'));
const capMs = Number(arg('cap', '120')) * 1000;
const FROM = '127.0.0.2';
const TO = '127.0.0.3';

for (const a of approaches)
  if (!['ours', 'rewrite', 'naive'].includes(a)) throw new Error(`unknown approach ${a}`);

const uptime = () => execFileSync('uptime', { encoding: 'utf8' }).trim();
const log = (line: string) => console.log(`[${new Date().toISOString().slice(11, 19)}] ${line}`);

async function versions(target: Target): Promise<{ haproxy: string; dataplaneapi?: string }> {
  const haproxy = (await target.masterCli('show version')).trim().split('\n')[0] ?? '?';
  if (!target.dataplane) return { haproxy };
  const info = await fetch(`${target.dataplane.apiUrl}/v3/info`, {
    headers: {
      authorization: `Basic ${Buffer.from(`admin:${target.dataplane.password}`).toString('base64')}`,
    },
  }).then((r) => r.json() as Promise<{ api?: { version?: string } }>);
  return { haproxy, dataplaneapi: info.api?.version ?? '?' };
}

async function main(): Promise<void> {
  mkdirSync(outDir, { recursive: true });
  if (process.argv.includes('--report-only')) {
    // Writes the Markdown and the chart again from compare.json, without measuring.
    const report = JSON.parse(readFileSync(join(outDir, 'compare.json'), 'utf8')) as Report;
    writeFileSync(join(outDir, 'compare.md'), markdown(report, 'compare.svg'));
    writeFileSync(join(outDir, 'compare.svg'), chart(report));
    return;
  }
  await sweepTestbedContainers();
  if (!process.argv.includes('--no-build'))
    execFileSync('npm', ['run', '--silent', 'build'], { cwd: REPO, stdio: 'inherit' });
  const report: Report = {
    environment: {
      date: new Date().toISOString(),
      machine: cpus()[0]?.model ?? 'unknown',
      cores: cpus().length,
      memoryGb: Math.round(totalmem() / 1024 ** 3),
      kernel: release(),
      node: process.version,
      haproxy: {},
      uptime: { start: uptime() },
      command: `npx tsx bench/compare.ts ${process.argv.slice(2).join(' ')}`.trim(),
      omitted: [],
    },
    runs: [],
  };
  if (!source)
    report.environment.omitted.push(
      'the Data Plane API provider (no KUBEBYON_TEST_DATAPLANEAPI_BIN or _IMAGE)',
    );
  const write = () => {
    writeFileSync(join(outDir, 'compare.json'), `${JSON.stringify(report, null, 2)}\n`);
    writeFileSync(join(outDir, 'compare.md'), markdown(report, 'compare.svg'));
    writeFileSync(join(outDir, 'compare.svg'), chart(report));
  };

  const servers = await startIdentityServers([FROM, TO], 16);
  const kubeDir = mkdtempSync(join(tmpdir(), 'kubebyon-bench-kube-'));
  let kube: BenchKube | undefined;
  try {
    if (approaches.includes('ours')) {
      log('starting kube-apiserver');
      kube = await startBenchKube(kubeDir, FROM);
    }
    for (const provider of providers) {
      for (const n of ns) {
        for (const name of approaches) {
          log(`== ${provider}, N = ${n}, ${name}`);
          let target: Target | undefined;
          let approach: Approach | undefined;
          const started = Date.now();
          try {
            if (kube) await kube.setNodeAddress(FROM);
            target = await startTarget(provider, version, source);
            const v = await versions(target);
            report.environment.haproxy[provider] = v.haproxy;
            if (v.dataplaneapi) report.environment.dataplaneapi = v.dataplaneapi;
            approach =
              name === 'ours'
                ? await startOurs(target, kube as BenchKube)
                : await startBaseline(name, target, FROM);
            const result = await runScenario(approach, target, {
              n,
              changes,
              burst,
              capMs,
              from: FROM,
              to: TO,
              servers,
              log: (line) => log(`  ${line}`),
            });
            report.runs.push(result);
          } catch (err) {
            log(`  failed: ${err instanceof Error ? err.stack : String(err)}`);
            report.runs.push({
              provider,
              n,
              approach: name,
              startedAt: new Date(started).toISOString(),
              error: err instanceof Error ? err.message.slice(0, 500) : String(err),
            } as RunResult);
          } finally {
            await approach?.stop().catch((e) => log(`  stop: ${e}`));
            await target?.stop().catch((e) => log(`  stop: ${e}`));
          }
          log(`  took ${Math.round((Date.now() - started) / 1000)} s`);
          report.environment.uptime.end = uptime();
          write();
        }
      }
    }
  } finally {
    await kube?.stop();
    await servers.close();
    rmSync(kubeDir, { recursive: true, force: true });
    await sweepTestbedContainers();
  }
  report.environment.uptime.end = uptime();
  write();
  log(`wrote ${join(outDir, 'compare.md')}`);
}

await main();
