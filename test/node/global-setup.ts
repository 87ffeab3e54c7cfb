import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { TestProject } from 'vitest/node';

const repo = join(import.meta.dirname, '..', '..');
const kube = (script: string) => join(repo, 'scripts', 'kube', script);

declare module 'vitest' {
  export interface ProvidedContext {
    nodeEnv: Record<string, string>;
    nodeImages: Record<string, string>;
    helmBin: string;
    nodeUpSeconds: number;
  }
}

function keyValues(text: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const line of text.split('\n')) {
    const m = /^([A-Z_]+)=(.*)$/.exec(line.trim());
    if (m?.[1]) out[m[1]] = m[2] ?? '';
  }
  return out;
}

/**
 * The node suite's setup: a real one-node Kubernetes (scripts/kube/node-up.sh, which builds what is missing),
 * the local images imported into its containerd, and Helm. Teardown (node-down.sh) gives the host back.
 * KUBEBYON_TEST_NODE_KEEP=1 leaves the node up after the run (to look at it; node-down.sh removes it).
 */
export async function setup(project: TestProject): Promise<void> {
  const started = Date.now();
  // A node a killed run left behind is torn down first: each run starts from nothing.
  if (!process.env.KUBEBYON_TEST_NODE_REUSE) execFileSync(kube('node-down.sh'), { stdio: 'inherit' });
  const up = spawnSync(kube('node-up.sh'), { stdio: ['ignore', 'pipe', 'inherit'], encoding: 'utf8' });
  if (up.status !== 0) throw new Error(`scripts/kube/node-up.sh failed (exit ${up.status})`);
  const env = keyValues(up.stdout);
  const images = keyValues(
    execFileSync(kube('node-images.sh'), { stdio: ['ignore', 'pipe', 'inherit'], encoding: 'utf8' }),
  );
  const helmScript = kube('build-helm.sh');
  if (!existsSync(helmScript)) throw new Error('scripts/kube/build-helm.sh is missing (the chart branch)');
  const helmBin = execFileSync(helmScript, { stdio: ['ignore', 'pipe', 'inherit'], encoding: 'utf8' }).trim();
  const nodeUpSeconds = Number(
    readFileSync(join(env.KUBE_NODE_DIR ?? '', 'env'), 'utf8').match(/KUBE_NODE_UP_SECONDS=([\d.]+)/)?.[1],
  );
  console.log(
    `[node] node up in ${nodeUpSeconds} s (script), setup with images and helm in ${((Date.now() - started) / 1000).toFixed(1)} s`,
  );
  project.provide('nodeEnv', env);
  project.provide('nodeImages', images);
  project.provide('helmBin', helmBin);
  project.provide('nodeUpSeconds', nodeUpSeconds);
}

export async function teardown(): Promise<void> {
  if (process.env.KUBEBYON_TEST_NODE_KEEP === '1') return;
  execFileSync(kube('node-down.sh'), {
    stdio: 'inherit',
    env: { ...process.env, KUBEBYON_NODE_KEEP_LOGS: process.env.KUBEBYON_TEST_NODE_LOGS ?? '' },
  });
}
