import { createHash, randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  type HaproxyTestbed,
  haproxyVersionUnderTest,
  type OwnedFileSetup,
  startHaproxyTestbed,
} from '../support/haproxy-testbed.js';
import { freeLoopbackPort } from '../support/ports.js';
import { type ServiceProcess, startServiceProcess } from '../support/service-process.js';
import { getVersion, startVersionServer, type VersionServer } from '../support/version-server.js';

/**
 * What every end-to-end case runs against: a real HAProxy (host networking) whose operator-owned file has
 * its own TLS frontend and a `console` backend, each in front of a local HTTPS server, and the service's
 * owned file loaded as a second `-f`.
 */
export interface E2eHaproxy {
  haproxy: HaproxyTestbed;
  /** The SNI frontend's port (KUBEBYON_HAPROXY_BIND_ADDR and KUBEBYON_PUBLIC_PORT). */
  sniPort: number;
  /** The operator's own frontend: must keep serving, untouched, through everything. */
  operatorUrl: string;
  operatorFileHash(): string;
  readonly initialOperatorFileHash: string;
  stateDir: string;
  secret: string;
  /**
   * The service's environment for this HAProxy (owned file, check files, master socket, check binary); with
   * `setup`, for another owned file of the same HAProxy (a second adapter).
   */
  env(extra?: Record<string, string>, setup?: OwnedFileSetup): Record<string, string>;
  startService(extra?: Record<string, string>, setup?: OwnedFileSetup): Promise<ServiceProcess>;
  /**
   * How many configurations HAProxy has loaded, from its own log ("Loading success"), once that log, which
   * trails HAProxy, shows every load its master counts now.
   */
  loads(): Promise<number>;
  operatorServes(): Promise<boolean>;
  stop(): Promise<void>;
}

export async function startE2eHaproxy(options: { secondOwnedFile?: boolean } = {}): Promise<E2eHaproxy> {
  const operator = await startVersionServer('operator');
  const console_ = await startVersionServer('console');
  const operatorPort = await freeLoopbackPort();
  const sniPort = await freeLoopbackPort();
  const haproxy = await startHaproxyTestbed(
    `global
  stats socket /etc/kubebyon/admin.sock mode 600 level admin
  log stderr format raw local0 info
defaults
  mode http
  timeout connect 2s
  timeout client 30s
  timeout server 30s
frontend operator_https
  mode tcp
  bind 127.0.0.1:${operatorPort}
  default_backend operator
backend operator
  mode tcp
  server web1 127.0.0.1:${operator.port}
backend console
  mode tcp
  server web1 127.0.0.1:${console_.port}
`,
    haproxyVersionUnderTest(),
    { ownedFile: true, secondOwnedFile: options.secondOwnedFile ?? false },
  );
  const owned = haproxy.owned;
  if (!owned) throw new Error('no owned file');
  const stateDir = mkdtempSync(join(tmpdir(), 'kubebyon-e2e-'));
  const secret = randomBytes(24).toString('hex');
  const hash = () => createHash('sha256').update(readFileSync(haproxy.configPath)).digest('hex');
  const initial = hash();
  const operatorUrl = `https://operator.example.net:${operatorPort}`;
  const env = (extra: Record<string, string> = {}, setup: OwnedFileSetup = owned) => ({
    KUBEBYON_PROVIDER: 'haproxy',
    KUBEBYON_LOG_LEVEL: 'info',
    KUBEBYON_STATE_FILE: join(stateDir, setup === owned ? 'clusters.json' : 'clusters-second.json'),
    KUBEBYON_HAPROXY_OWNED_FILE: setup.path,
    KUBEBYON_HAPROXY_CHECK_FILES: setup.checkFiles.join(','),
    KUBEBYON_HAPROXY_MASTER_SOCKET: setup.masterSocket,
    KUBEBYON_HAPROXY_BIN: setup.checkBin,
    KUBEBYON_HAPROXY_BIND_ADDR: `127.0.0.1:${sniPort}`,
    KUBEBYON_PUBLIC_PORT: String(sniPort),
    ...extra,
  });
  const servers: VersionServer[] = [operator, console_];
  return {
    haproxy,
    sniPort,
    operatorUrl,
    operatorFileHash: hash,
    initialOperatorFileHash: initial,
    stateDir,
    secret,
    env,
    startService: (extra = {}, setup = owned) =>
      startServiceProcess(env(extra, setup), secret, { until: 'readyz', startTimeoutMs: 50_000 }),
    loads: () => haproxy.loads(),
    async operatorServes() {
      const answer = await getVersion(operatorUrl);
      return 'identity' in answer && answer.identity === 'operator';
    },
    async stop() {
      await haproxy.stop();
      await Promise.all(servers.map((s) => s.close()));
      rmSync(stateDir, { recursive: true, force: true });
    },
  };
}

/** `KUBEBYON_HAPROXY_INSTANCES` for stock HAProxies `beds` (named h0, h1, …), each with its owned file. */
export function instancesSetting(beds: readonly E2eHaproxy[]): string {
  return JSON.stringify(
    beds.map((bed, i) => {
      const owned = bed.haproxy.owned;
      if (!owned) throw new Error('no owned file');
      return {
        name: `h${i}`,
        masterSocket: owned.masterSocket,
        ownedFile: owned.path,
        checkFiles: owned.checkFiles,
        haproxyBin: owned.checkBin,
        bind: `127.0.0.1:${bed.sniPort}`,
      };
    }),
  );
}
