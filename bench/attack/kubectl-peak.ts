/**
 * A legitimate client's own peak, per source, as the hardened frontend's stick table counts it: real `kubectl`
 * against a real kube-apiserver (scripts/kube/run-apiserver.sh, loopback) reached through HAProxy by SNI.
 * Each scenario starts from a cleared entry; the entry (`conn_cur`, `conn_rate(10s)`) is read every 100 ms.
 */
import { execFile, spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import type { HaproxyVersion } from '../../test/support/haproxy-testbed.js';
import { startKubeApiserver } from '../../test/support/kube-apiserver.js';
import { type AttackBed, HOST, startAttackBed } from './bed.js';
import { parseEntry } from './stats.js';

const run = promisify(execFile);
const KEY = '::ffff:127.0.0.1';

export interface KubectlScenario {
  name: string;
  commands: number;
  ms: number;
  connCurMax: number;
  connRateMax: number;
  failed: number;
}

export interface KubectlPeakResult {
  version: HaproxyVersion;
  kubectl: string;
  date: string;
  scenarios: KubectlScenario[];
}

export async function kubectlPeak(version: HaproxyVersion, kubectlBin: string): Promise<KubectlPeakResult> {
  const kube = await startKubeApiserver();
  const work = mkdtempSync(join(tmpdir(), 'kubebyon-kubectl-peak-'));
  let bed: AttackBed | undefined;
  try {
    const apiPort = Number(new URL(kube.env.KUBE_APISERVER_URL ?? '').port);
    bed = await startAttackBed(version, apiPort);
    await bed.load('after');
    const kubeconfig = join(work, 'kubeconfig');
    writeFileSync(
      kubeconfig,
      [
        'apiVersion: v1',
        'kind: Config',
        'clusters:',
        '- name: c',
        '  cluster:',
        `    server: https://127.0.0.1:${bed.port}`,
        `    tls-server-name: ${HOST}`,
        '    insecure-skip-tls-verify: true',
        'users:',
        '- name: u',
        '  user:',
        `    token: ${kube.env.KUBE_ADMIN_TOKEN}`,
        'contexts:',
        '- name: x',
        '  context: {cluster: c, user: u}',
        'current-context: x',
        '',
      ].join('\n'),
    );
    const { stdout: version_ } = await run(kubectlBin, ['version', '--client']);
    const b = bed;
    let failed = 0;
    const kubectl = async (args: string[], cacheDir: string) => {
      try {
        await run(kubectlBin, ['--kubeconfig', kubeconfig, '--cache-dir', cacheDir, ...args], {
          timeout: 60_000,
        });
      } catch {
        failed++;
      }
    };
    const scenarios: KubectlScenario[] = [];
    const scenario = async (name: string, commands: number, body: () => Promise<void>) => {
      await b.cli(`clear table kubebyon_sni key ${KEY}`);
      failed = 0;
      let connCurMax = 0;
      let connRateMax = 0;
      let sampling = true;
      const sampler = (async () => {
        for (let i = 0; sampling && i < 3000; i++) {
          const e = parseEntry(await b.cli(`show table kubebyon_sni key ${KEY}`));
          if (e) {
            connCurMax = Math.max(connCurMax, e.conn_cur ?? 0);
            connRateMax = Math.max(connRateMax, e.conn_rate ?? 0);
          }
          await sleep(100);
        }
      })();
      const t0 = Date.now();
      await body();
      const ms = Date.now() - t0;
      await sleep(300);
      sampling = false;
      await sampler;
      scenarios.push({ name, commands, ms, connCurMax, connRateMax, failed });
      // Let every connection of this scenario end before the next clears the entry.
      await sleep(1_000);
    };
    const fresh = () => mkdtempSync(join(work, 'cache-'));
    const warm = fresh();
    await scenario('`kubectl get ns`, cold discovery cache, 10 in a row', 10, async () => {
      for (let i = 0; i < 10; i++) await kubectl(['get', 'ns'], fresh());
    });
    await scenario('`kubectl get ns`, warm cache, 20 in a row', 20, async () => {
      for (let i = 0; i < 20; i++) await kubectl(['get', 'ns'], warm);
    });
    await scenario('10 `kubectl get pods -A` at once, cold caches', 10, async () => {
      await Promise.all(Array.from({ length: 10 }, () => kubectl(['get', 'pods', '-A'], fresh())));
    });
    await scenario('`kubectl get ns -w` held 15 s while 20 `kubectl get cm -A` run', 21, async () => {
      const watch = spawn(kubectlBin, ['--kubeconfig', kubeconfig, '--cache-dir', warm, 'get', 'ns', '-w'], {
        stdio: 'ignore',
      });
      try {
        for (let i = 0; i < 20; i++) await kubectl(['get', 'cm', '-A'], warm);
        await sleep(Math.max(0, 15_000));
      } finally {
        watch.kill('SIGKILL');
      }
    });
    await scenario('`kubectl apply` of 50 ConfigMaps (one file), then `kubectl delete`', 2, async () => {
      const file = join(work, 'cms.yaml');
      writeFileSync(
        file,
        Array.from(
          { length: 50 },
          (_, i) =>
            `apiVersion: v1\nkind: ConfigMap\nmetadata: {name: peak-${i}, namespace: default}\ndata: {i: "${i}"}\n`,
        ).join('---\n'),
      );
      await kubectl(['apply', '-f', file], warm);
      await kubectl(['delete', '-f', file], warm);
    });
    return {
      version,
      kubectl: version_.split('\n')[0] ?? '',
      date: new Date().toISOString(),
      scenarios,
    };
  } finally {
    await bed?.stop();
    await kube.stop();
    rmSync(work, { recursive: true, force: true });
  }
}

export function kubectlPeakMarkdown(r: KubectlPeakResult): string {
  return `${[
    '# bench/attack.ts --mode kubectl-peak: what a real kubectl costs one source',
    '',
    `${r.date.slice(0, 16)}Z, HAProxy ${r.version} with the hardened frontend, ${r.kubectl}, a real kube-apiserver`,
    "behind it by SNI. Per scenario, the largest `conn_cur` and `conn_rate(10s)` of the source's stick-table",
    'entry, read every 100 ms (the entry cleared before each scenario).',
    '',
    '| scenario | kubectl commands | took | conn_cur max | conn_rate(10s) max | failed |',
    '| --- | --- | --- | --- | --- | --- |',
    ...r.scenarios.map(
      (s) =>
        `| ${s.name} | ${s.commands} | ${(s.ms / 1000).toFixed(1)} s | ${s.connCurMax} | ${s.connRateMax} | ${s.failed} |`,
    ),
    '',
  ].join('\n')}`;
}
