/**
 * The HAProxy under attack: a test-bed container (host networking, loopback only) started with the operator's
 * global/defaults of docker/compose/haproxy.cfg and the owned file the stock provider writes with its default
 * settings, for two real clusters routed by SNI to a TLS backend on 127.0.0.1: `HOST`, open to all, and
 * `RESTRICTED_HOST`, whose authorized networks hold the legitimate client's address only. "after" is that file
 * exactly as the adapter writes it (its guard, `src/haproxy/edge.ts`); "before" is the same file with the SNI
 * frontend as releases before the guard wrote it (`preGuard`), loaded by a reload.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import pino from 'pino';
import { isEdgeLine } from '../../src/haproxy/edge.js';
import { DEFAULT_RENDER_OPTIONS, type RenderOptions, renderDesired } from '../../src/haproxy/render.js';
import { plan } from '../../src/plan/plan.js';
import { OwnedProvider } from '../../src/registry/owned-provider.js';
import { resolveRoutes } from '../../src/routes/route.js';
import { type HaproxyVersion, startHaproxyTestbed } from '../../test/support/haproxy-testbed.js';
import { registry } from '../../test/support/owner.js';
import { freeLoopbackPort } from '../../test/support/ports.js';
import { stockProviderFor } from '../../test/support/stock-haproxy.js';
import { REPO } from '../compare/cli.js';

/** The cluster every legitimate client reaches (and attack 5 reaches too). */
export const HOST = 'api.alpha.kubebyon.test';
/** A cluster whose authorized networks hold only the legitimate client (attack 6 comes from outside them). */
export const RESTRICTED_HOST = 'api.beta.kubebyon.test';
export const RESTRICTED_NETWORKS = ['127.0.0.2/32'];

/** The two clusters, both served by the bench's TLS server on 127.0.0.1:`backendPort`. */
export function attackClaims(backendPort: number) {
  const endpoints = [{ address: '127.0.0.1', port: backendPort }];
  return [
    { cluster: 'alpha', host: HOST, endpoints, claimedAt: 0 },
    { cluster: 'beta', host: RESTRICTED_HOST, endpoints, networks: RESTRICTED_NETWORKS, claimedAt: 0 },
  ];
}

/**
 * The owned file with the SNI frontend as the adapter wrote it before the guard (commit a653034 and earlier):
 * the guard's lines (`isEdgeLine`) replaced by the inspect delay and the ClientHello accept, the refusals
 * backend (which only the guard uses) dropped. Everything else byte for byte.
 */
export function preGuard(owned: string, inspectDelayMs: number): string {
  const sections = owned.split('\n\n');
  const out: string[] = [];
  for (const section of sections) {
    if (/^backend \S+_refusals /.test(section)) continue;
    if (!/^frontend kubebyon_sni /.test(section)) {
      out.push(section);
      continue;
    }
    const lines = section.split('\n');
    const bind = lines.findIndex((l) => /^ {2}bind /.test(l));
    if (bind < 0) throw new Error('no bind in the kubebyon_sni frontend');
    const kept = lines.filter((l, i) => i <= bind || !isEdgeLine(l.trim()));
    kept.splice(
      bind + 1,
      0,
      `  tcp-request inspect-delay ${inspectDelayMs}ms`,
      '  tcp-request content accept if { req.ssl_hello_type 1 }',
    );
    out.push(kept.join('\n'));
  }
  return out.join('\n\n');
}

export interface AttackBed {
  version: HaproxyVersion;
  /** Which provider wrote the owned configuration. */
  provider: 'stock' | 'dataplaneapi';
  containerId: string;
  /** The SNI frontend's port on 127.0.0.1. */
  port: number;
  /** The SNI frontend exactly as the provider wrote it: the shipped guard ("after"). */
  ownedToday: string;
  /** The owned file HAProxy runs now. */
  owned: string;
  /** The SNI map's path (inside the container and on the host alike). */
  mapPath: string;
  /** Loads the file as written ("after") or its pre-guard twin ("before"); resolves once the new worker runs it. */
  load(config: 'before' | 'after'): Promise<void>;
  /** Replaces the owned file by `text` and reloads (stock provider only). */
  reloadWith(text: string): Promise<void>;
  /** A command to the current worker through the master CLI. */
  cli(command: string): Promise<string>;
  /** The current worker's RSS in KiB, read from the host's /proc. */
  workerRssKiB(): Promise<number | null>;
  /** The current worker's CPU time so far (user + system), in ms, from the host's /proc. */
  workerCpuMs(): Promise<number | null>;
  stop(): Promise<void>;
}

/** The operator's global and defaults, as compose.yaml runs them. */
export function operatorConfig(): string {
  return readFileSync(join(REPO, 'docker/compose/haproxy.cfg'), 'utf8');
}

/** Settings other than the defaults (`KUBEBYON_HAPROXY_*`), as the service would render them. */
export type RenderOverrides = Partial<Pick<RenderOptions, 'maxConn' | 'perSource' | 'inspectDelayMs'>>;

export async function startAttackBed(
  version: HaproxyVersion,
  backendPort: number,
  overrides: RenderOverrides = {},
): Promise<AttackBed> {
  const port = await freeLoopbackPort();
  const haproxy = await startHaproxyTestbed(operatorConfig(), version, { ownedFile: true });
  const owned = haproxy.owned;
  if (!owned) throw new Error('no owned file');
  try {
    // The adapter's own rendering and apply: the frontend, the slot pool and one cluster, as it writes them.
    const provider = stockProviderFor(haproxy, pino({ level: 'silent' }));
    const render: RenderOptions = {
      ...DEFAULT_RENDER_OPTIONS,
      ...overrides,
      bind: { address: '127.0.0.1', port },
    };
    const signal = () => AbortSignal.timeout(60_000);
    const claims = attackClaims(backendPort);
    const writer = new OwnedProvider(provider, registry);
    const current = await writer.read(signal(), { fresh: true });
    const p = plan(renderDesired(resolveRoutes(claims).routes, render), current.state, {
      grow: 'when_needed',
    });
    await writer.apply(p, current, signal());
    await provider.close();
    const ownedToday = readFileSync(owned.path, 'utf8');
    const mapPath = join(haproxy.dir, render.sniMap);
    const worker = await workerProc(haproxy.containerId, haproxy.masterCli);
    const bed: AttackBed = {
      version,
      provider: 'stock',
      containerId: haproxy.containerId,
      port,
      ownedToday,
      owned: ownedToday,
      mapPath,
      cli: (command) => haproxy.masterCli(`@1 ${command}`),
      async load(config) {
        const text = config === 'before' ? preGuard(ownedToday, render.inspectDelayMs) : ownedToday;
        if (text !== bed.owned) await bed.reloadWith(text);
      },
      async reloadWith(text) {
        await owned.reloadWith(text);
        bed.owned = text;
        // The old worker goes once its connections are gone (the watch streams are reopened by the caller).
        await sleep(500);
      },
      ...worker,
      stop: () => haproxy.stop(),
    };
    return bed;
  } catch (err) {
    await haproxy.stop();
    throw err;
  }
}

async function containerPid(id: string): Promise<number> {
  const { execFile } = await import('node:child_process');
  return new Promise((resolve, reject) =>
    execFile('docker', ['inspect', '-f', '{{.State.Pid}}', id], (err, out) =>
      err ? reject(err) : resolve(Number(out.trim())),
    ),
  );
}

type MasterCli = (command: string) => Promise<string>;

/** The current worker's RSS and CPU time, read from the host's /proc (the container's PID 1 is the master). */
export async function workerProc(containerId: string, masterCli: MasterCli) {
  const masterPid = await containerPid(containerId);
  return {
    async workerRssKiB(): Promise<number | null> {
      const pid = await currentWorkerHostPid(masterCli, masterPid);
      if (pid === null) return null;
      try {
        const m = /VmRSS:\s+([0-9]+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
        return m ? Number(m[1]) : null;
      } catch {
        return null;
      }
    },
    async workerCpuMs(): Promise<number | null> {
      const pid = await currentWorkerHostPid(masterCli, masterPid);
      if (pid === null) return null;
      try {
        // Fields 14 and 15 (utime, stime) after the command's closing parenthesis, in clock ticks (100/s).
        const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
        const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
        return (Number(fields[11]) + Number(fields[12])) * 10;
      } catch {
        return null;
      }
    },
  };
}

/** The host pid of the worker the master CLI calls current (`show proc`'s first worker), via NSpid. */
async function currentWorkerHostPid(masterCli: MasterCli, masterHostPid: number): Promise<number | null> {
  const proc = await masterCli('show proc');
  const m = /^([0-9]+)\s+worker\s/m.exec(proc);
  if (!m) return null;
  const inner = Number(m[1]);
  let children: number[] = [];
  try {
    children = readFileSync(`/proc/${masterHostPid}/task/${masterHostPid}/children`, 'utf8')
      .trim()
      .split(/\s+/)
      .filter(Boolean)
      .map(Number);
  } catch {
    return null;
  }
  for (const pid of children) {
    try {
      const ns = /NSpid:\s+([0-9\s]+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
      const ids = ns?.[1]?.trim().split(/\s+/).map(Number) ?? [];
      if (ids[ids.length - 1] === inner) return pid;
    } catch {}
  }
  return null;
}
