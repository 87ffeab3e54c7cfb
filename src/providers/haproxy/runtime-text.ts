import { isIP } from 'node:net';
import { alertsIn } from '../../haproxy/alerts.js';
import { isHaproxyName } from '../../naming/names.js';
import { UnsafeValueError } from './safe-values.js';

/**
 * Parsers for the answers of HAProxy's master CLI and runtime API (`show stat`, `show servers state`,
 * `show proc`, `reload`), and the runtime commands the provider sends. Pure; the same on HAProxy 2.6 and 3.0.
 */

export interface RunningProxy {
  name: string;
  kind: 'frontend' | 'backend';
  /** The proxy's numeric id (`iid`): the owned frontend carries the file's generation here. */
  id: number;
  /** Backends: the load-balancing algorithm HAProxy runs (`algo`). */
  algo: string;
}

export interface RunningServer {
  backend: string;
  name: string;
  address: string;
  port: number;
  /** Health checks configured and enabled (CHK_ST_ENABLED in `srv_check_state`). */
  check: boolean;
}

export class RuntimeAnswerError extends Error {
  override readonly name = 'RuntimeAnswerError';
}

/** `show stat` (CSV) restricted to frontends and backends: the proxies the worker runs. */
export function parseShowStat(text: string): RunningProxy[] {
  const lines = text.split('\n');
  const header = lines.find((l) => l.startsWith('# '));
  if (!header) throw new RuntimeAnswerError(`unexpected answer to show stat: ${text.slice(0, 200)}`);
  const cols = header.slice(2).split(',');
  const at = (name: string) => {
    const i = cols.indexOf(name);
    if (i < 0) throw new RuntimeAnswerError(`show stat has no ${name} column`);
    return i;
  };
  const [px, sv, iid, algo] = [at('pxname'), at('svname'), at('iid'), at('algo')];
  const out: RunningProxy[] = [];
  for (const line of lines) {
    if (line === '' || line.startsWith('#')) continue;
    const f = line.split(',');
    const kind = f[sv] === 'FRONTEND' ? 'frontend' : f[sv] === 'BACKEND' ? 'backend' : null;
    const name = f[px] ?? '';
    // Internal proxies (e.g. `<HTTPCLIENT>`) are HAProxy's own, never configuration.
    if (!kind || name.startsWith('<')) continue;
    out.push({ name, kind, id: Number(f[iid]), algo: f[algo] ?? '' });
  }
  return out;
}

/** `show backend`: the names of the backends the worker runs (HAProxy's internal `<...>` ones left out). */
export function parseShowBackend(text: string): string[] {
  const lines = text.split('\n').map((l) => l.trim());
  if (lines[0] !== '# name')
    throw new RuntimeAnswerError(`unexpected answer to show backend: ${text.slice(0, 200)}`);
  return lines.slice(1).filter((l) => l !== '' && !l.startsWith('#') && !l.startsWith('<'));
}

const CHK_ST_ENABLED = 0x04;

/** `show servers state` (format 1): every server of every backend, with the address HAProxy uses now. */
export function parseServersState(text: string): RunningServer[] {
  const lines = text.split('\n');
  const header = lines.find((l) => l.startsWith('# '));
  if (!header || lines[0]?.trim() !== '1')
    throw new RuntimeAnswerError(`unexpected answer to show servers state: ${text.slice(0, 200)}`);
  const cols = header.slice(2).trim().split(/\s+/);
  const at = (name: string) => {
    const i = cols.indexOf(name);
    if (i < 0) throw new RuntimeAnswerError(`show servers state has no ${name} column`);
    return i;
  };
  const [be, name, addr, port, chk] = [
    at('be_name'),
    at('srv_name'),
    at('srv_addr'),
    at('srv_port'),
    at('srv_check_state'),
  ];
  const out: RunningServer[] = [];
  for (const line of lines.slice(1)) {
    if (line.trim() === '' || line.startsWith('#')) continue;
    const f = line.trim().split(/\s+/);
    out.push({
      backend: f[be] ?? '',
      name: f[name] ?? '',
      address: f[addr] ?? '',
      port: Number(f[port]),
      check: (Number(f[chk]) & CHK_ST_ENABLED) !== 0,
    });
  }
  return out;
}

export interface ProcState {
  /** Reloads the master has done, and how many of them failed (`1 [failed: 0]`). */
  reloads: number;
  failed: number;
  /** Worker pids, newest first as HAProxy lists them. */
  workers: number[];
  version: string;
  /** How long the master has run: it falls when HAProxy was restarted (its reload count starts again at 0). */
  uptimeSeconds: number;
}

/** The master CLI's `show proc`. */
export function parseShowProc(text: string): ProcState {
  const master = /^(\d+)\s+master\s+(\d+)\s+\[failed:\s*(\d+)\]\s+(\S+)\s+(\S+)/m.exec(text);
  if (!master) throw new RuntimeAnswerError(`unexpected answer to show proc: ${text.slice(0, 200)}`);
  const workers = [...text.matchAll(/^(\d+)\s+worker\s/gm)].map((m) => Number(m[1]));
  return {
    reloads: Number(master[2]),
    failed: Number(master[3]),
    workers,
    version: master[5] ?? '',
    uptimeSeconds: uptimeSeconds(master[4] ?? ''),
  };
}

// `0d00h02m01s`; anything else reads as 0 (a restart is then only seen by the reload count).
function uptimeSeconds(text: string): number {
  const m = /^(\d+)d(\d+)h(\d+)m(\d+)s$/.exec(text);
  return m ? ((Number(m[1]) * 24 + Number(m[2])) * 60 + Number(m[3])) * 60 + Number(m[4]) : 0;
}

/**
 * Where a reload stands, from `show proc` before and after it: `reloaded` once the master counts one more
 * reload; `restarted` when HAProxy itself was restarted meanwhile (its uptime or reload count fell: it loaded
 * the files on disk from scratch, and its count will not pass the old one); else `pending`.
 */
export function reloadProgress(before: ProcState, now: ProcState): 'pending' | 'reloaded' | 'restarted' {
  if (now.uptimeSeconds < before.uptimeSeconds || now.reloads < before.reloads) return 'restarted';
  return now.reloads > before.reloads ? 'reloaded' : 'pending';
}

/**
 * The master's answer to `reload`: 3.0 says `Success=1` or `Success=0` followed by the startup log;
 * 2.6 says nothing (`unknown`: the caller watches `show proc`).
 */
export function parseReloadAnswer(text: string): { status: 'ok' | 'failed' | 'unknown'; alerts: string[] } {
  const m = /^Success=([01])/m.exec(text);
  if (!m) return { status: 'unknown', alerts: alertsIn(text) };
  return { status: m[1] === '1' ? 'ok' : 'failed', alerts: alertsIn(text) };
}

function hostPort(address: string, port: number): string {
  return address.includes(':') ? `[${address}]:${port}` : `${address}:${port}`;
}

/**
 * `backend/server`, refused unless both are HAProxy names: commands go `;`-separated on one master-CLI line,
 * so a value with a `;`, a space or a newline would end the command and run what follows it.
 */
function serverRef(backend: string, server: string): string {
  if (!isHaproxyName(backend) || !isHaproxyName(server))
    throw new UnsafeValueError(
      `refusing to send server ${JSON.stringify(`${backend}/${server}`)} to HAProxy`,
    );
  return `${backend}/${server}`;
}

/** An address and port as a command carries them, refused unless an IP address and a port number. */
function endpoint(address: string, port: number): { address: string; port: number } {
  if (isIP(address) === 0)
    throw new UnsafeValueError(`refusing to send server address ${JSON.stringify(address)} to HAProxy`);
  if (!Number.isInteger(port) || port < 0 || port > 65535)
    throw new UnsafeValueError(`refusing to send server port ${JSON.stringify(port)} to HAProxy`);
  return { address, port };
}

/**
 * Runtime commands for the current worker (`@1`), with the answers that mean success. Every value is
 * checked here, where the command is made: nothing unvalidated reaches the master CLI (`UnsafeValueError`).
 */
export const runtime = {
  setAddr: (backend: string, server: string, address: string, port: number) => ({
    command: `@1 set server ${serverRef(backend, server)} addr ${endpoint(address, port).address} port ${port}`,
    // 3.0 says "nothing changed" when the server already has that address and port.
    ok: /changed from|no need to change|nothing changed/i,
  }),
  add: (backend: string, server: string, address: string, port: number, check: boolean) => ({
    command: `@1 add server ${serverRef(backend, server)} ${hostPort(endpoint(address, port).address, port)}${check ? ' check' : ''}`,
    ok: /New server registered/i,
  }),
  enable: (backend: string, server: string) => ({
    command: `@1 enable server ${serverRef(backend, server)}`,
    ok: /^\s*$/,
  }),
  enableHealth: (backend: string, server: string) => ({
    command: `@1 enable health ${serverRef(backend, server)}`,
    ok: /^\s*$/,
  }),
  disable: (backend: string, server: string) => ({
    command: `@1 disable server ${serverRef(backend, server)}`,
    ok: /^\s*$/,
  }),
  shutdownSessions: (backend: string, server: string) => ({
    command: `@1 shutdown sessions server ${serverRef(backend, server)}`,
    ok: /^\s*$/,
  }),
  del: (backend: string, server: string) => ({
    command: `@1 del server ${serverRef(backend, server)}`,
    ok: /Server deleted/i,
  }),
};
