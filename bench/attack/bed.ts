/**
 * The HAProxy under attack: a test-bed container (host networking, loopback only) started with the operator's
 * global/defaults of docker/compose/haproxy.cfg and the owned file the stock provider writes, with one real
 * cluster routed by SNI to a TLS backend on 127.0.0.1. "before" is that file as the adapter writes it today;
 * "after" is the same file with the hardening of ./harden.ts, loaded by a reload.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import pino from 'pino';
import { DEFAULT_RENDER_OPTIONS, type RenderOptions, renderDesired } from '../../src/haproxy/render.js';
import { plan } from '../../src/plan/plan.js';
import { OwnedProvider } from '../../src/registry/owned-provider.js';
import { resolveRoutes } from '../../src/routes/route.js';
import {
  type HaproxyTestbed,
  type HaproxyVersion,
  startHaproxyTestbed,
} from '../../test/support/haproxy-testbed.js';
import { registry } from '../../test/support/owner.js';
import { freeLoopbackPort } from '../../test/support/ports.js';
import { stockProviderFor } from '../../test/support/stock-haproxy.js';
import { REPO } from '../compare/cli.js';
import { type Hardening, harden } from './harden.js';

/** The cluster every legitimate client reaches (and attack 5 reaches too). */
export const HOST = 'api.alpha.kubebyon.test';

export interface AttackBed {
  version: HaproxyVersion;
  haproxy: HaproxyTestbed;
  /** The SNI frontend's port on 127.0.0.1. */
  port: number;
  /** The owned file exactly as the stock provider wrote it (today's configuration). */
  ownedToday: string;
  /** The owned file HAProxy runs now. */
  owned: string;
  /** The SNI map's path (inside the container and on the host alike). */
  mapPath: string;
  /** Loads today's file, or today's file hardened with `h`; resolves once the new worker runs it. */
  load(config: 'before' | 'after', h: Hardening): Promise<void>;
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

export async function startAttackBed(version: HaproxyVersion, backendPort: number): Promise<AttackBed> {
  const port = await freeLoopbackPort();
  const haproxy = await startHaproxyTestbed(operatorConfig(), version, { ownedFile: true });
  const owned = haproxy.owned;
  if (!owned) throw new Error('no owned file');
  try {
    // The adapter's own rendering and apply: the frontend, the slot pool and one cluster, as it writes them.
    const provider = stockProviderFor(haproxy, pino({ level: 'silent' }));
    const render: RenderOptions = { ...DEFAULT_RENDER_OPTIONS, bind: { address: '127.0.0.1', port } };
    const signal = () => AbortSignal.timeout(60_000);
    const claims = [
      {
        cluster: 'alpha',
        host: HOST,
        endpoints: [{ address: '127.0.0.1', port: backendPort }],
        claimedAt: 0,
      },
    ];
    const writer = new OwnedProvider(provider, registry);
    const current = await writer.read(signal(), { fresh: true });
    const p = plan(renderDesired(resolveRoutes(claims).routes, render), current.state, {
      grow: 'when_needed',
    });
    await writer.apply(p, current, signal());
    await provider.close();
    const ownedToday = readFileSync(owned.path, 'utf8');
    const mapPath = join(haproxy.dir, render.sniMap);
    const masterPid = await containerPid(haproxy.containerId);
    const cli = (command: string) => haproxy.masterCli(`@1 ${command}`);
    const bed: AttackBed = {
      version,
      haproxy,
      port,
      ownedToday,
      owned: ownedToday,
      mapPath,
      cli,
      async load(config, h) {
        const text = config === 'before' ? ownedToday : harden(ownedToday, h, mapPath);
        if (text !== bed.owned) {
          await owned.reloadWith(text);
          bed.owned = text;
          // The old worker goes once its connections are gone (the watch streams are reopened by the caller).
          await sleep(500);
        }
      },
      async workerRssKiB() {
        const pid = await currentWorkerHostPid(haproxy, masterPid);
        if (pid === null) return null;
        try {
          const m = /VmRSS:\s+([0-9]+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
          return m ? Number(m[1]) : null;
        } catch {
          return null;
        }
      },
      async workerCpuMs() {
        const pid = await currentWorkerHostPid(haproxy, masterPid);
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

/** The host pid of the worker the master CLI calls current (`show proc`'s first worker), via NSpid. */
async function currentWorkerHostPid(haproxy: HaproxyTestbed, masterHostPid: number): Promise<number | null> {
  const proc = await haproxy.masterCli('show proc');
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
