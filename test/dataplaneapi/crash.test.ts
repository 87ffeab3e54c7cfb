import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LEDGER_FILE } from '../../src/providers/dataplaneapi/index.js';
import { DPAPI_USER } from '../support/dataplaneapi-testbed.js';
import { startProxy } from '../support/http-proxy.js';
import { freeLoopbackPort } from '../support/ports.js';
import { sniProbe } from '../support/tls.js';
import { type Harness, openTransactions, source, startHarness, versionUnderTest } from './harness.js';

const run = promisify(execFile);
const repo = resolve(import.meta.dirname, '../..');

function serve(env: Record<string, string>): ChildProcess {
  const child = spawn(process.execPath, ['dist/cli/main.js', 'serve'], {
    cwd: repo,
    env: { PATH: process.env.PATH ?? '', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  child.stdout?.resume();
  child.stderr?.resume();
  return child;
}

async function until<T>(what: string, timeoutMs: number, probe: () => Promise<T | undefined>): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

describe.skipIf(!source)(`the service killed (-9) mid-apply, HAProxy ${versionUnderTest()}`, () => {
  let h: Harness;
  let dir: string;
  const children: ChildProcess[] = [];

  beforeAll(async () => {
    await run('npm', ['run', '--silent', 'build'], { cwd: repo });
    h = await startHarness();
    dir = mkdtempSync(join(tmpdir(), 'kubebyon-crash-'));
  });
  afterAll(async () => {
    for (const c of children) c.kill('SIGKILL');
    await h?.close();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('leaves no open transaction once restarted, and converges', async () => {
    const stateFile = join(dir, 'clusters.json');
    writeFileSync(
      stateFile,
      JSON.stringify({
        version: 1,
        clusters: [
          {
            name: 'alpha',
            host: 'alpha.example.com',
            target: { nodePort: h.alpha.port },
            claimedAt: 1,
            updatedAt: 1,
          },
        ],
      }),
    );
    // The first commit never reaches the API: the service is killed while its transaction is open.
    let commitSeen = false;
    const proxy = await startProxy(h.tb.url, (req) => {
      if (req.method === 'PUT' && /\/transactions\/[^/?]+/.test(req.path)) {
        commitSeen = true;
        return 'drop';
      }
      return 'forward';
    });
    const env = (url: string) => ({
      KUBEBYON_PROVIDER: 'dataplaneapi',
      KUBEBYON_DATAPLANE_URL: url,
      KUBEBYON_DATAPLANE_USERNAME: DPAPI_USER,
      KUBEBYON_DATAPLANE_PASSWORD: h.tb.password,
      KUBEBYON_DATAPLANE_RELOAD_TIMEOUT_MS: '10000',
      KUBEBYON_WEBHOOK_SECRET: 'a-long-enough-test-secret',
      KUBEBYON_STATE_FILE: stateFile,
      KUBEBYON_LISTEN_ADDR: `127.0.0.1:${listen}`,
      KUBEBYON_HAPROXY_BIND_ADDR: `127.0.0.1:${h.sniPort}`,
      KUBEBYON_HAPROXY_DEFAULT_BACKEND: 'console_tls',
      KUBEBYON_STATIC_NODE_ADDRESSES: '127.0.0.1',
      KUBEBYON_RECONCILE_DEBOUNCE_MS: '50',
      KUBEBYON_LOG_LEVEL: 'warn',
    });
    const listen = await freeLoopbackPort();
    let leaked: string[] = [];
    try {
      const first = serve(env(proxy.url));
      children.push(first);
      await until('the service to send its commit', 60_000, async () => (commitSeen ? true : undefined));
      leaked = await openTransactions(h.tb);
      expect(leaked).toHaveLength(1);
      // The id was on disk before any write of the transaction.
      expect(JSON.parse(readFileSync(join(dir, LEDGER_FILE), 'utf8')).open).toEqual(leaked);
      first.kill('SIGKILL');
      await new Promise((r) => first.once('exit', r));
      expect(await openTransactions(h.tb)).toEqual(leaked);
    } finally {
      await proxy.close();
    }

    const second = serve(env(h.tb.url));
    children.push(second);
    await until('alpha to be routed after the restart', 60_000, async () => {
      const probe = await sniProbe(h.sniPort, 'alpha.example.com', 1000);
      return 'reached' in probe && probe.reached === 'alpha' ? true : undefined;
    });
    // The leaked one is gone. What may be open is the one transaction the live service opened ahead of its
    // next change, listed in its ledger. (The commit's answer, and the ledger update after it, may trail the
    // reload that routes the traffic.)
    await until('the ledger to list exactly what is open', 10_000, async () => {
      const open = await openTransactions(h.tb);
      const listed: string[] = existsSync(join(dir, LEDGER_FILE))
        ? JSON.parse(readFileSync(join(dir, LEDGER_FILE), 'utf8')).open
        : [];
      return open.length <= 1 && [...open].sort().join() === [...listed].sort().join() ? true : undefined;
    });
    for (const id of leaked) expect(await openTransactions(h.tb)).not.toContain(id);
    // A graceful stop drops it too.
    second.kill('SIGTERM');
    await new Promise((r) => second.once('exit', r));
    expect(await openTransactions(h.tb)).toEqual([]);
  });
});
