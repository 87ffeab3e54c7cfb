import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir, totalmem } from 'node:os';
import { join } from 'node:path';
import { sweepTestbedContainers } from '../../test/support/haproxy-testbed.js';
import type { TargetArgs } from './cli.js';
import { type IdentityServers, startIdentityServers } from './identity.js';
import { type BenchKube, startBenchKube } from './kube.js';
import { startTarget, type Target } from './targets.js';

/** The loopback address the stand-in API servers listen on and the nodes are said to have. */
export const BENCH_ADDRESS = '127.0.0.2';

/** A bench's log line, stamped with the time of day. */
export const benchLog = (line: string) => console.log(`[${new Date().toISOString().slice(11, 19)}] ${line}`);

/** The load average now (`uptime`'s end), for a result's record of how busy the machine was. */
export const loadAverage = () =>
  execFileSync('uptime', { encoding: 'utf8' })
    .trim()
    .replace(/^.*load/, 'load');

export interface EachTargetOptions<R> {
  args: TargetArgs;
  /** `<out>/<name>.json` holds the results, one per `key`; earlier runs' are kept unless `keep` drops them. */
  name: string;
  key(r: R): string;
  keep?(r: R): boolean;
  /** One provider at one N, on a fresh HAProxy (and Data Plane API). */
  run(target: Target, n: number, shared: { kube: BenchKube; servers: IdentityServers }): Promise<R>;
  /** The reports written beside the JSON after every run, from every result kept. */
  report(all: R[], machine: string): Record<string, string>;
}

/**
 * What bench/zero-reload.ts and bench/networks.ts share: stand-in API servers and a kube-apiserver for the
 * whole run, a fresh target per provider and N (its containers swept after it), and the results written
 * after every run, so that a run cut short keeps what it measured.
 */
export async function eachTarget<R>(o: EachTargetOptions<R>): Promise<void> {
  const { source, ns, providers, version, outDir } = o.args;
  const jsonPath = join(outDir, `${o.name}.json`);
  const results = new Map<string, R>();
  try {
    const kept = (JSON.parse(readFileSync(jsonPath, 'utf8')).results ?? []) as R[];
    for (const r of kept) if (o.keep?.(r) ?? true) results.set(o.key(r), r);
  } catch {
    // No earlier results.
  }
  const machine = `${cpus().length} x ${cpus()[0]?.model.trim()}, ${Math.round(totalmem() / 2 ** 30)} GiB, Node ${process.version}, HAProxy ${version}`;
  mkdirSync(outDir, { recursive: true });
  const work = mkdtempSync(join(tmpdir(), `kubebyon-${o.name}-bench-`));
  const servers = await startIdentityServers([BENCH_ADDRESS], 40);
  const kube = await startBenchKube(work, BENCH_ADDRESS);
  try {
    for (const provider of providers)
      for (const n of ns) {
        const target = await startTarget(provider, version, source);
        // The bed's own disk writes reach the disk now, not during the measurement: docker's vfs storage
        // copies each container's image (about 100 MB), which the kernel writes back 30 s later, and an fsync
        // meanwhile waits behind it (an fsync probe beside a run: 50-330 ms while 100 MB were dirty).
        execFileSync('sync');
        try {
          const r = await o.run(target, n, { kube, servers });
          results.set(o.key(r), r);
          const all = [...results.values()];
          writeFileSync(
            jsonPath,
            `${JSON.stringify({ machine, date: new Date().toISOString(), results: all }, null, 1)}\n`,
          );
          for (const [file, text] of Object.entries(o.report(all, machine)))
            writeFileSync(join(outDir, file), text);
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
}
