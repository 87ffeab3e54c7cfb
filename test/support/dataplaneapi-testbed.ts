import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import axios, { type AxiosInstance } from 'axios';
import { GenericContainer, type StartedTestContainer, Wait } from 'testcontainers';
import {
  type HaproxyVersion,
  sweepTestbedContainers,
  TESTBED_LABEL,
  testbedLabelValue,
  unixSocketCommand,
} from './haproxy-testbed.js';
import { freeLoopbackPort } from './ports.js';
import { waitFor } from './wait.js';

const run = promisify(execFile);

/**
 * A real HAProxy with a real Data Plane API beside it, in one container with host networking, for the
 * `dataplaneapi` suite. The API comes from one of:
 * - KUBEBYON_TEST_DATAPLANEAPI_BIN: a `dataplaneapi` binary, layered onto the local HAProxy test-bed image
 *   (`kubebyon-testbed/haproxy:<v>`) with one COPY; every HAProxy version of the test bed can be used;
 * - KUBEBYON_TEST_DATAPLANEAPI_IMAGE: an image that bundles HAProxy and the API, e.g.
 *   `haproxytech/haproxy-debian:3.0` (its own HAProxy version; `KUBEBYON_TEST_DATAPLANEAPI_IMAGE_HAPROXY`
 *   names its binary, default `/usr/local/sbin/haproxy`).
 * Nothing here builds the API: it only uses what it is pointed at.
 */
export type DataplaneSource =
  | { kind: 'bin'; path: string }
  | { kind: 'image'; image: string; haproxyBin: string };

export function dataplaneSource(env: NodeJS.ProcessEnv = process.env): DataplaneSource | undefined {
  if (env.KUBEBYON_TEST_DATAPLANEAPI_BIN) return { kind: 'bin', path: env.KUBEBYON_TEST_DATAPLANEAPI_BIN };
  if (env.KUBEBYON_TEST_DATAPLANEAPI_IMAGE)
    return {
      kind: 'image',
      image: env.KUBEBYON_TEST_DATAPLANEAPI_IMAGE,
      haproxyBin: env.KUBEBYON_TEST_DATAPLANEAPI_IMAGE_HAPROXY ?? '/usr/local/sbin/haproxy',
    };
  return undefined;
}

export const DPAPI_USER = 'admin';

export interface DataplaneTestbed {
  version: HaproxyVersion | 'image';
  /** `http://127.0.0.1:<port>`, without `/v3`. */
  url: string;
  password: string;
  /** Host folder mounted at /etc/kubebyon: haproxy.cfg, sockets, the API's files. */
  dir: string;
  /** An authenticated client on `<url>/v3` that never throws on a status (for tests acting as another tool). */
  api: AxiosInstance;
  /** HAProxy's successful (re)loads so far, from its own log (which trails HAProxy: see `loads`). */
  loadCount(): number;
  /**
   * `loadCount` once the log shows every load the master counts now (the first, and each reload, done or
   * failed): what to compare before and after a change that may reload. A count read from the log right after
   * a reload may miss that reload's line, which then arrives later as one load too many.
   */
  loads(): Promise<number>;
  /** HAProxy's log lines so far. */
  haproxyLog(): string;
  dataplaneLog(): string;
  masterCli(command: string): Promise<string>;
  runtimeCli(command: string): Promise<string>;
  /** The container's id. */
  containerId: string;
  /** Sends `signal` to the API's process inside the container; resolves once the API no longer answers. */
  stopApi(signal?: 'KILL' | 'TERM'): Promise<void>;
  /** Starts the API again in the container (as a supervisor would); resolves once it answers. */
  startApi(): Promise<void>;
  /**
   * `docker restart -t 0` of the container (HAProxy, and the API with it, killed), then the API started again
   * once HAProxy runs, as a supervisor would; resolves once the API answers.
   */
  restart(): Promise<void>;
  stop(): Promise<void>;
}

async function imageExists(tag: string): Promise<boolean> {
  try {
    await run('docker', ['image', 'inspect', tag]);
    return true;
  } catch {
    return false;
  }
}

/** The test-bed image with the binary added (FROM the local image, one COPY; cached by the binary's hash). */
async function layeredImage(path: string, version: HaproxyVersion): Promise<string> {
  const hash = createHash('sha256').update(readFileSync(path)).digest('hex').slice(0, 12);
  const tag = `kubebyon-testbed/dataplaneapi:${version}-${hash}`;
  if (await imageExists(tag)) return tag;
  const context = mkdtempSync(join(tmpdir(), 'kubebyon-dpapi-image-'));
  try {
    copyFileSync(path, join(context, 'dataplaneapi'));
    writeFileSync(
      join(context, 'Dockerfile'),
      `FROM kubebyon-testbed/haproxy:${version}\nCOPY dataplaneapi /usr/local/bin/dataplaneapi\n`,
    );
    await run('docker', ['build', '-q', '-t', tag, context], { maxBuffer: 16 * 1024 * 1024 });
  } finally {
    rmSync(context, { recursive: true, force: true });
  }
  return tag;
}

/** HAProxy's foreign part of the configuration: what an operator had before the service came. */
export function foreignConfig(o: { consolePort: number; consoleBackendPort: number }): string {
  return [
    'global',
    '  stats socket /etc/kubebyon/admin.sock mode 600 level admin expose-fd listeners',
    '  log stderr format raw local0',
    '',
    // A named defaults, referenced explicitly: the API then has nothing to rename, so the foreign sections'
    // text can be compared byte for byte (an unnamed one becomes `unnamed_defaults_1` on the first write).
    'defaults base',
    '  mode tcp',
    '  log global',
    '  timeout connect 5s',
    '  timeout client 1h',
    '  timeout server 1h',
    '',
    'frontend console from base',
    '  mode http',
    `  bind 127.0.0.1:${o.consolePort}`,
    '  http-request return status 200 content-type text/plain string "console\\n"',
    '',
    'backend console_tls from base',
    '  mode tcp',
    '  balance roundrobin',
    `  server web1 127.0.0.1:${o.consoleBackendPort}`,
    '',
  ].join('\n');
}

function apiConfig(
  port: number,
  password: string,
  haproxyBin: string,
  version: HaproxyVersion | 'image',
): string {
  // 2.6 has no master-socket reload through the API: the reload command signals HAProxy's master (PID 1).
  const reload = '/bin/busybox kill -USR2 1';
  return [
    'config_version: 2',
    'name: kubebyon_test',
    'dataplaneapi:',
    '  host: 127.0.0.1',
    `  port: ${port}`,
    '  user:',
    `    - name: ${DPAPI_USER}`,
    `      password: ${password}`,
    '      insecure: true',
    '  transaction:',
    '    transaction_dir: /etc/kubebyon/dpapi/transactions',
    '  resources:',
    '    maps_dir: /etc/kubebyon/dpapi/maps',
    '    ssl_certs_dir: /etc/kubebyon/dpapi/ssl',
    '    general_storage_dir: /etc/kubebyon/dpapi/general',
    '    spoe_dir: /etc/kubebyon/dpapi/spoe',
    '    dataplane_storage_dir: /etc/kubebyon/dpapi/dataplane',
    'haproxy:',
    '  config_file: /etc/kubebyon/haproxy.cfg',
    `  haproxy_bin: ${haproxyBin}`,
    '  master_runtime: /etc/kubebyon/master.sock',
    '  master_worker_mode: true',
    '  reload:',
    '    reload_delay: 1',
    `    reload_cmd: ${reload}`,
    `    restart_cmd: ${reload}`,
    `# HAProxy ${version}`,
    '',
  ].join('\n');
}

/**
 * Starts HAProxy (master-worker, PID 1, host networking) with `config`, then the Data Plane API beside it,
 * and waits until the API answers with the credentials. The caller must `stop()` it. `password`: the API's,
 * e.g. one shared by several test beds that one service drives with one set of credentials (random if unset).
 */
export async function startDataplaneTestbed(
  source: DataplaneSource,
  version: HaproxyVersion,
  config: string,
  options: { password?: string; files?: Record<string, string> } = {},
): Promise<DataplaneTestbed> {
  const image = source.kind === 'bin' ? await layeredImage(source.path, version) : source.image;
  const haproxyBin = source.kind === 'bin' ? '/usr/sbin/haproxy' : source.haproxyBin;
  const dir = mkdtempSync(join(tmpdir(), 'kubebyon-dpapi-'));
  for (const d of ['transactions', 'maps', 'ssl', 'general', 'spoe', 'dataplane'])
    mkdirSync(join(dir, 'dpapi', d), { recursive: true });
  writeFileSync(join(dir, 'haproxy.cfg'), config);
  // Files the configuration loads at start (map files, say), by path relative to /etc/kubebyon.
  for (const [path, text] of Object.entries(options.files ?? {})) writeFileSync(join(dir, path), text);
  const port = await freeLoopbackPort();
  const password =
    options.password ?? `pw-${createHash('sha256').update(String(Math.random())).digest('hex').slice(0, 16)}`;
  const shownVersion = source.kind === 'bin' ? version : 'image';
  writeFileSync(join(dir, 'dataplaneapi.yaml'), apiConfig(port, password, haproxyBin, shownVersion));

  const logLines: string[] = [];
  let container: StartedTestContainer | undefined;
  try {
    container = await new GenericContainer(image)
      .withNetworkMode('host')
      .withLabels({ [TESTBED_LABEL]: testbedLabelValue() })
      .withBindMounts([{ source: dir, target: '/etc/kubebyon', mode: 'rw' }])
      .withEntrypoint([
        haproxyBin,
        '-W',
        '-db',
        '-S',
        '/etc/kubebyon/master.sock,mode,600',
        '-f',
        '/etc/kubebyon/haproxy.cfg',
        // The API's general storage: the slots file (`KUBEBYON_DATAPLANE_SLOTS=storage`) is loaded from it.
        '-f',
        '/etc/kubebyon/dpapi/general',
      ])
      .withWaitStrategy(Wait.forLogMessage(/Loading success/))
      .withStartupTimeout(30_000)
      .start();
  } catch (err) {
    await sweepTestbedContainers().catch(() => {});
    rmSync(dir, { recursive: true, force: true });
    throw err;
  }
  const started = container;
  const logs = await started.logs();
  logs.on('data', (line: Buffer | string) => logLines.push(line.toString()));
  const loadCount = () => logLines.join('').split('Loading success').length - 1;
  const stop = async () => {
    try {
      await started.stop({ remove: true, removeVolumes: true });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  };
  const url = `http://127.0.0.1:${port}`;
  const api = axios.create({
    baseURL: `${url}/v3`,
    auth: { username: DPAPI_USER, password },
    validateStatus: () => true,
    timeout: 30_000,
    proxy: false,
  });
  const answers = () =>
    api.get('/services/haproxy/configuration/version', { timeout: 2_000 }).then(
      (res) => res.status === 200,
      () => false,
    );
  // Whether the API's process (its pid kept in the mounted folder) still runs; no pid yet: starting.
  const apiRuns = () =>
    run('docker', [
      'exec',
      started.getId(),
      '/bin/sh',
      '-c',
      'f=/etc/kubebyon/dataplaneapi.pid; [ ! -s $f ] || /bin/busybox kill -0 "$(cat $f)"',
    ]).then(
      () => true,
      () => false,
    );
  const spawnApi = () => {
    rmSync(join(dir, 'dataplaneapi.pid'), { force: true });
    // A second process in the same container; its parent is the runtime, not HAProxy's master. Its pid is
    // kept in the mounted folder, so that a fault test can signal exactly this process.
    return run('docker', [
      'exec',
      '-d',
      started.getId(),
      '/bin/sh',
      '-c',
      'echo $$ >/etc/kubebyon/dataplaneapi.pid; exec /usr/local/bin/dataplaneapi -f /etc/kubebyon/dataplaneapi.yaml >>/etc/kubebyon/dataplaneapi.log 2>&1',
    ]);
  };
  const startApi = async () => {
    // Seen with v3.0.23 and v3.2.15: the first start with a new configuration file may exit 1 without a
    // word, and the next one works. An API that exits before it answers is started again, up to 3 times.
    for (let attempt = 1; ; attempt++) {
      await spawnApi();
      const outcome = await waitFor(
        async () => ((await answers()) ? 'answers' : (await apiRuns()) ? undefined : 'exited'),
        30_000,
        `the Data Plane API to answer at ${url}`,
        { everyMs: 200, ok: (o) => o !== undefined },
      ).catch((err: Error) => {
        throw new Error(`${err.message}: ${readLog(dir, 'dataplaneapi.log')}`);
      });
      if (outcome === 'answers') return;
      console.warn(`the Data Plane API exited before it answered (start ${attempt}); starting it again`);
      if (attempt >= 3)
        throw new Error(`the Data Plane API exited ${attempt} times: ${readLog(dir, 'dataplaneapi.log')}`);
    }
  };
  try {
    await waitFor(() => loadCount() >= 1, 10_000, 'the first "Loading success"', { everyMs: 25 });
    await startApi();
    return {
      version: shownVersion,
      url,
      password,
      dir,
      api,
      loadCount,
      async loads() {
        const proc = await unixSocketCommand(join(dir, 'master.sock'), 'show proc');
        // The master's line: `<pid> master <reloads> [failed: <n>] <uptime> <version>`.
        const master = /^\d+\s+master\s+(\d+)\s+\[failed:/m.exec(proc);
        if (!master) throw new Error(`unexpected answer to show proc: ${proc.slice(0, 200)}`);
        const attempts = 1 + Number(master[1]);
        const logged = () => {
          const log = logLines.join('');
          return (
            loadCount() +
            log.split('Loading failure').length -
            1 +
            log.split('Failed to load worker').length -
            1
          );
        };
        await waitFor(logged, 10_000, `HAProxy's log to show ${attempts} loads or failures`, {
          ok: (n) => n >= attempts,
          everyMs: 25,
        });
        return loadCount();
      },
      haproxyLog: () => logLines.join(''),
      dataplaneLog: () => readLog(dir, 'dataplaneapi.log'),
      masterCli: (command) => unixSocketCommand(join(dir, 'master.sock'), command),
      runtimeCli: (command) => unixSocketCommand(join(dir, 'admin.sock'), command),
      containerId: started.getId(),
      async stopApi(signal = 'KILL') {
        await run('docker', [
          'exec',
          started.getId(),
          '/bin/sh',
          '-c',
          `/bin/busybox kill -${signal} "$(cat /etc/kubebyon/dataplaneapi.pid)"`,
        ]);
        await waitFor(
          async () => !(await answers()),
          30_000,
          `the Data Plane API to stop answering after SIG${signal}`,
        );
      },
      startApi,
      async restart() {
        await run('docker', ['restart', '-t', '0', started.getId()]);
        // HAProxy's master answers on its (recreated) socket once it runs again.
        const runs = () =>
          unixSocketCommand(join(dir, 'master.sock'), 'show proc', 1).then((out) => out.includes('worker'));
        await waitFor(runs, 30_000, 'HAProxy to run again after the restart');
        await startApi();
      },
      stop,
    };
  } catch (err) {
    await stop();
    throw err;
  }
}

function readLog(dir: string, name: string): string {
  try {
    return readFileSync(join(dir, name), 'utf8');
  } catch {
    return '';
  }
}
