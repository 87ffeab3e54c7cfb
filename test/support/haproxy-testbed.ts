import { execFile } from 'node:child_process';
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createConnection } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import { GenericContainer, type StartedTestContainer, Wait } from 'testcontainers';
import { alive } from './pid.js';
import { waitFor } from './wait.js';

const run = promisify(execFile);

/** Every test-bed container carries this label, so leftovers of a crashed run can be swept. */
export const TESTBED_LABEL = 'kubebyon.testbed';

/**
 * The HAProxy versions the test bed has an image for (scripts/build-testbed-images.sh): 3.0 (Debian trixie,
 * the default), 2.6 (bookworm) and 3.2 LTS (forky).
 */
export const HAPROXY_VERSIONS = ['3.0', '2.6', '3.2'] as const;
export type HaproxyVersion = (typeof HAPROXY_VERSIONS)[number];

export function isHaproxyVersion(v: string): v is HaproxyVersion {
  return (HAPROXY_VERSIONS as readonly string[]).includes(v);
}

export function haproxyVersionUnderTest(): HaproxyVersion {
  const v = process.env.KUBEBYON_TEST_HAPROXY_VERSION ?? '3.0';
  if (!isHaproxyVersion(v))
    throw new Error(`KUBEBYON_TEST_HAPROXY_VERSION must be one of ${HAPROXY_VERSIONS.join(', ')}, got ${v}`);
  return v;
}

export interface HaproxyTestbed {
  version: HaproxyVersion;
  /** The container's id (`docker stop`/`start` it to take this HAProxy away and bring it back). */
  containerId: string;
  /** Host folder mounted at /etc/kubebyon in the container: haproxy.cfg and the sockets live here. */
  dir: string;
  configPath: string;
  readConfig(): string;
  /** Sends one command to the master CLI and returns its answer. */
  masterCli(command: string): Promise<string>;
  /** Writes a new haproxy.cfg and reloads through the master socket; resolves once the new workers run. */
  reloadWith(config: string): Promise<void>;
  /** How many times HAProxy has (re)loaded a configuration successfully, from its own log. */
  loadCount(): number;
  /**
   * `loadCount` once the log, which trails HAProxy, shows every load the master counts now (the first, and
   * each reload, done or failed): what to compare before and after a change that may reload.
   */
  loads(): Promise<number>;
  /** HAProxy's log so far (stderr and stdout of the container). */
  log(): string;
  stop(): Promise<void>;
  /** With `ownedFile`: what the stock-HAProxy provider needs to drive this HAProxy. */
  owned?: OwnedFileSetup;
  /** With `secondOwnedFile`: a second adapter's file, loaded after the first (two owners, one HAProxy). */
  second?: OwnedFileSetup;
}

export interface OwnedFileSetup {
  /** The file the provider owns (host path); HAProxy loads it as its second `-f`. */
  path: string;
  /** The operator's file, as the provider's check files. */
  checkFiles: string[];
  masterSocket: string;
  /**
   * A `haproxy` for `-c` that is the very binary under test: a wrapper running it inside the container
   * (the folder is mounted at its host path too, so the paths agree).
   */
  checkBin: string;
  /** Replaces the owned file (plain write) and reloads; resolves once HAProxy has loaded it. */
  reloadWith(content: string): Promise<void>;
}

export interface TestbedOptions {
  /** Also load `<dir>/kubebyon.cfg` (created empty) as a second `-f`, for the stock-HAProxy provider. */
  ownedFile?: boolean;
  /** With `ownedFile`, also `<dir>/kubebyon-second.cfg` as a third `-f`: another adapter's own file. */
  secondOwnedFile?: boolean;
}

/** Talks to a unix socket the way HAProxy's CLI wants: write, half-close, read to the end. */
export async function unixSocketCommand(path: string, command: string, attempts = 20): Promise<string> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await new Promise<string>((resolve, reject) => {
        const socket = createConnection(path);
        let out = '';
        socket.setEncoding('utf8');
        socket.on('connect', () => socket.end(`${command}\n`));
        socket.on('data', (chunk: string) => {
          out += chunk;
        });
        socket.on('error', reject);
        socket.on('close', () => resolve(out));
      });
    } catch (err) {
      // The socket file appears before HAProxy accepts on it.
      if (attempt >= attempts) throw err;
      await sleep(100);
    }
  }
}

/** The label's value: the process that started the container, so a sweep spares runs still alive. */
export const testbedLabelValue = (): string => String(process.pid);

/**
 * Removes test-bed containers left by a run that died before its cleanup: those whose starting process is
 * gone. Containers of runs still going (another suite in parallel) are left alone.
 */
export async function sweepTestbedContainers(): Promise<void> {
  const { stdout } = await run('docker', [
    'ps',
    '-a',
    '--filter',
    `label=${TESTBED_LABEL}`,
    '--format',
    `{{.ID}} {{.Label "${TESTBED_LABEL}"}}`,
  ]);
  const ids = stdout
    .split('\n')
    .filter(Boolean)
    .map((line) => line.split(' '))
    .filter(([, owner]) => !(owner && /^[0-9]+$/.test(owner) && alive(Number(owner))))
    .map(([id]) => id as string);
  if (ids.length > 0) await run('docker', ['rm', '-f', ...ids]);
}

/**
 * Starts a fresh HAProxy (master-worker, host networking) from the local test-bed image with `config`,
 * and waits until it has loaded it. The caller must `stop()` it; the label lets a sweep catch what it misses.
 */
export async function startHaproxyTestbed(
  config: string,
  version = haproxyVersionUnderTest(),
  options: TestbedOptions = {},
): Promise<HaproxyTestbed> {
  const dir = mkdtempSync(join(tmpdir(), 'kubebyon-haproxy-'));
  const configPath = join(dir, 'haproxy.cfg');
  writeFileSync(configPath, config);
  const ownedPath = join(dir, 'kubebyon.cfg');
  const secondPath = join(dir, 'kubebyon-second.cfg');
  if (options.ownedFile) writeFileSync(ownedPath, '');
  if (options.ownedFile && options.secondOwnedFile) writeFileSync(secondPath, '');
  const logLines: string[] = [];
  let container: StartedTestContainer | undefined;
  try {
    let image = new GenericContainer(`kubebyon-testbed/haproxy:${version}`)
      .withNetworkMode('host')
      .withLabels({ [TESTBED_LABEL]: testbedLabelValue() })
      .withBindMounts([
        { source: dir, target: '/etc/kubebyon', mode: 'rw' },
        // The same folder at its host path: `haproxy -c` inside the container sees the provider's paths.
        ...(options.ownedFile ? [{ source: dir, target: dir, mode: 'rw' as const }] : []),
      ])
      .withWaitStrategy(Wait.forLogMessage(/Loading success/))
      .withStartupTimeout(30_000);
    // The entrypoint passes its arguments on to haproxy: the owned file is loaded after haproxy.cfg.
    if (options.ownedFile)
      image = image.withCommand([
        '-f',
        '/etc/kubebyon/kubebyon.cfg',
        ...(options.secondOwnedFile ? ['-f', '/etc/kubebyon/kubebyon-second.cfg'] : []),
      ]);
    container = await image.start();
  } catch (err) {
    await sweepOne(dir);
    throw err;
  }
  const logs = await container.logs();
  logs.on('data', (line: Buffer | string) => logLines.push(line.toString()));
  // Counted over the whole log: a chunk of the stream may hold several lines.
  const loadCount = () => logLines.join('').split('Loading success').length - 1;
  // A failed reload: 2.6 and 3.0 log "Loading failure"; 3.2's master logs "Failed to load worker" instead.
  const loadAttempts = () => {
    const log = logLines.join('');
    return (
      loadCount() + log.split('Loading failure').length - 1 + log.split('Failed to load worker').length - 1
    );
  };
  // The startup line may have been read by the wait strategy before our stream attached.
  await waitFor(() => loadCount() >= 1, 10_000, 'the first "Loading success" in the log stream', {
    everyMs: 25,
  });

  const started = container;
  const masterSocket = join(dir, 'master.sock');
  const reloadWith = async (path: string, content: string) => {
    writeFileSync(path, content);
    const before = loadCount();
    // 2.6 answers nothing to `reload`; both versions log "Loading success" once new workers run.
    await unixSocketCommand(masterSocket, 'reload');
    await waitFor(() => loadCount() > before, 10_000, 'HAProxy to reload', { everyMs: 25 });
  };
  let owned: OwnedFileSetup | undefined;
  let second: OwnedFileSetup | undefined;
  if (options.ownedFile) {
    const checkBin = join(dir, 'haproxy-check');
    writeFileSync(checkBin, `#!/bin/sh\nexec docker exec ${started.getId()} /usr/sbin/haproxy "$@"\n`);
    chmodSync(checkBin, 0o755);
    const setup = (path: string): OwnedFileSetup => ({
      path,
      checkFiles: [configPath],
      masterSocket,
      checkBin,
      reloadWith: (content) => reloadWith(path, content),
    });
    owned = setup(ownedPath);
    if (options.secondOwnedFile) second = setup(secondPath);
  }
  return {
    version,
    containerId: started.getId(),
    dir,
    configPath,
    readConfig: () => readFileSync(configPath, 'utf8'),
    masterCli: (command) => unixSocketCommand(masterSocket, command),
    loadCount,
    async loads() {
      const proc = await unixSocketCommand(masterSocket, 'show proc');
      // The master's line: `<pid> master <reloads> [failed: <n>] <uptime> <version>`. Its failed count
      // starts again at 0 after a successful reload: the log's failures are counted instead.
      const master = /^\d+\s+master\s+(\d+)\s+\[failed:/m.exec(proc);
      if (!master) throw new Error(`unexpected answer to show proc: ${proc.slice(0, 200)}`);
      const attempts = 1 + Number(master[1]);
      await waitFor(loadAttempts, 10_000, `HAProxy's log to show ${attempts} loads or failures`, {
        ok: (n) => n >= attempts,
        everyMs: 25,
      });
      return loadCount();
    },
    log: () => logLines.join(''),
    reloadWith: (newConfig) => reloadWith(configPath, newConfig),
    ...(owned ? { owned } : {}),
    ...(second ? { second } : {}),
    async stop() {
      try {
        await started.stop({ remove: true, removeVolumes: true });
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    },
  };
}

async function sweepOne(dir: string): Promise<void> {
  await sweepTestbedContainers().catch(() => {});
  rmSync(dir, { recursive: true, force: true });
}
