/**
 * bench/zero-reload.ts before and after a change, interleaved (before, after, before, after, ...), so that the
 * load of a shared machine falls on both sides alike; the spread between runs of the same side is the noise:
 *
 *   npx tsx bench/zero-reload-compare.ts --before a653034 [--before-dir <worktree>] [--pairs 2] [--n 5000,20000]
 *        [--providers haproxy|dataplaneapi] [--first before|after] [--changes 40] [--burst 1000] [--stream 1000]
 *        [--out bench/results]
 *
 * The same bench (this checkout's) runs both services: "after" is this checkout's `dist/`, "before" the build
 * of `--before` in its own worktree (`/tmp/kubebyon-before-<commit>`, made, linked to this node_modules and
 * built when missing), through BENCH_SERVICE_DIR; only the service differs. Builds this checkout first
 * (`--no-build` skips it). Each run's results, with `uptime` before and after it, are added to
 * <out>/zero-reload-refactor.json (runs already there are kept) and the table is written to
 * <out>/zero-reload-refactor.md after every run.
 */
import { execFileSync, spawn } from 'node:child_process';
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { cpus, tmpdir, totalmem } from 'node:os';
import { join, resolve } from 'node:path';
import { arg, list, REPO } from './compare/cli.js';
import { type CompareRun, compareMarkdown } from './zero-reload/compare-report.js';
import type { ZeroReloadResult } from './zero-reload/run.js';

const before = arg('before', 'a653034');
const pairs = Number(arg('pairs', '2'));
// `--first after` starts each pair with after: more pairs in the other order cancel a trend in the load.
const first = arg('first', 'before');
const ns = arg('n', '5000,20000');
const providers = list(arg('providers', 'haproxy'));
const outDir = resolve(REPO, arg('out', 'bench/results'));
const passOn = ['changes', 'burst', 'stream', 'haproxy'].flatMap((o) =>
  process.argv.includes(`--${o}`) ? [`--${o}`, arg(o, '')] : [],
);

const log = (line: string) => console.log(`[${new Date().toISOString().slice(11, 19)}] ${line}`);
const git = (...args: string[]) => execFileSync('git', ['-C', REPO, ...args], { encoding: 'utf8' }).trim();
const build = (dir: string) => execFileSync('npm', ['run', 'build'], { cwd: dir, stdio: 'inherit' });
const uptime = () => execFileSync('uptime', { encoding: 'utf8' }).trim();

const beforeCommit = git('rev-parse', `${before}^{commit}`);
const afterCommit = git('rev-parse', 'HEAD');
const afterLabel = `${git('rev-parse', '--abbrev-ref', 'HEAD')} ${afterCommit.slice(0, 7)}${git('status', '--porcelain', '--untracked-files=no') ? ' (with uncommitted changes)' : ''}`;
const beforeDir = resolve(arg('before-dir', join(tmpdir(), `kubebyon-before-${beforeCommit.slice(0, 7)}`)));
if (!existsSync(beforeDir)) {
  log(`worktree of ${beforeCommit.slice(0, 7)} at ${beforeDir}`);
  git('worktree', 'add', '--detach', beforeDir, beforeCommit);
}
if (!existsSync(join(beforeDir, 'node_modules')))
  symlinkSync(join(REPO, 'node_modules'), join(beforeDir, 'node_modules'));
if (!existsSync(join(beforeDir, 'dist/cli/main.js'))) build(beforeDir);
if (!process.argv.includes('--no-build')) build(REPO);

const jsonPath = join(outDir, 'zero-reload-refactor.json');
const runs: CompareRun[] = (() => {
  try {
    return JSON.parse(readFileSync(jsonPath, 'utf8')).runs ?? [];
  } catch {
    return [];
  }
})();
const machine = `${cpus().length} x ${cpus()[0]?.model.trim()}, ${Math.round(totalmem() / 2 ** 30)} GiB, Node ${process.version}`;

/** One run of bench/zero-reload.ts for one side; its results. */
function runSide(side: 'before' | 'after', out: string): Promise<ZeroReloadResult[]> {
  const env: NodeJS.ProcessEnv = { ...process.env };
  if (side === 'before') {
    env.BENCH_SERVICE_DIR = beforeDir;
    // What the release before the change read: the routing setting, and the API's reload timeout by its old name.
    env.BENCH_SERVICE_ENV = [
      'KUBEBYON_HAPROXY_ROUTING=map',
      'KUBEBYON_DATAPLANE_RELOAD_TIMEOUT_MS=600000',
      process.env.BENCH_SERVICE_ENV ?? '',
    ]
      .filter(Boolean)
      .join(',');
  }
  const args = ['tsx', 'bench/zero-reload.ts', '--n', ns, '--providers', providers.join(','), '--out', out];
  return new Promise((done, fail) => {
    const child = spawn('npx', [...args, ...passOn], { cwd: REPO, env, stdio: 'inherit' });
    child.on('error', fail);
    child.on('exit', (code) => {
      if (code !== 0) return fail(new Error(`bench/zero-reload.ts (${side}) exited ${code}`));
      done(JSON.parse(readFileSync(join(out, 'zero-reload.json'), 'utf8')).results);
    });
  });
}

mkdirSync(outDir, { recursive: true });
const work = mkdtempSync(join(tmpdir(), 'kubebyon-zr-compare-'));
try {
  for (let pair = 1; pair <= pairs; pair++)
    for (const side of first === 'after' ? (['after', 'before'] as const) : (['before', 'after'] as const)) {
      const startedAt = new Date().toISOString();
      const loadBefore = uptime();
      log(`pair ${pair}, ${side}: ${loadBefore}`);
      const results = await runSide(side, join(work, `${side}-${pair}`));
      const loadAfter = uptime();
      runs.push({
        side,
        commit: side === 'before' ? beforeCommit.slice(0, 7) : afterLabel,
        startedAt,
        uptimeBefore: loadBefore,
        uptimeAfter: loadAfter,
        results,
      });
      writeFileSync(jsonPath, `${JSON.stringify({ machine, runs }, null, 1)}\n`);
      writeFileSync(join(outDir, 'zero-reload-refactor.md'), compareMarkdown(runs, machine));
      log(`pair ${pair}, ${side} done: ${loadAfter}`);
    }
} finally {
  rmSync(work, { recursive: true, force: true });
}
