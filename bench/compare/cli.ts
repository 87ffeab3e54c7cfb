/** The command line and environment the bench scripts that start their own HAProxy test beds share. */
import { join, resolve } from 'node:path';
import { type DataplaneSource, dataplaneSource } from '../../test/support/dataplaneapi-testbed.js';
import type { HaproxyVersion } from '../../test/support/haproxy-testbed.js';
import type { ProviderName } from './targets.js';

/** The repository's root folder. */
export const REPO = join(import.meta.dirname, '..', '..');

/**
 * Testcontainers without its reaper container (a bench sweeps its own containers) and with ports reached on
 * localhost (the test beds use host networking). Set before the first container starts.
 */
export function useLoopbackTestcontainers(): void {
  process.env.TESTCONTAINERS_RYUK_DISABLED = 'true';
  process.env.TESTCONTAINERS_HOST_OVERRIDE = 'localhost';
}

/** The value after `--name`, or the fallback when the option (or its value) is missing. */
export function arg(name: string, fallback: string, argv: readonly string[] = process.argv): string {
  const i = argv.indexOf(`--${name}`);
  return i >= 0 && argv[i + 1] !== undefined ? (argv[i + 1] as string) : fallback;
}

/** A comma-separated list, trimmed, without empty items. */
export const list = (s: string): string[] =>
  s
    .split(',')
    .map((x) => x.trim())
    .filter(Boolean);

/** What `--n`, `--providers`, `--haproxy` and `--out` say, checked. */
export interface TargetArgs {
  source: DataplaneSource | undefined;
  ns: number[];
  providers: ProviderName[];
  version: HaproxyVersion;
  outDir: string;
}

/**
 * Sets up the environment and reads the options every such bench takes. The Data Plane API provider is on by
 * default only when a Data Plane API is given (KUBEBYON_TEST_DATAPLANEAPI_BIN or _IMAGE).
 */
export function targetArgs(defaultNs: string, argv: readonly string[] = process.argv): TargetArgs {
  useLoopbackTestcontainers();
  const source = dataplaneSource();
  const providers = list(
    arg('providers', source ? 'haproxy,dataplaneapi' : 'haproxy', argv),
  ) as ProviderName[];
  for (const p of providers)
    if (p !== 'haproxy' && p !== 'dataplaneapi') throw new Error(`unknown provider ${p}`);
  if (providers.includes('dataplaneapi') && !source)
    throw new Error(
      '--providers dataplaneapi needs KUBEBYON_TEST_DATAPLANEAPI_BIN or KUBEBYON_TEST_DATAPLANEAPI_IMAGE',
    );
  return {
    source,
    ns: list(arg('n', defaultNs, argv)).map(Number),
    providers,
    version: arg('haproxy', '3.0', argv) as HaproxyVersion,
    outDir: resolve(REPO, arg('out', 'bench/results', argv)),
  };
}
