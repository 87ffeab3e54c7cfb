import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LEDGER_FILE } from '../../src/providers/dataplaneapi/sweep.js';
import { DPAPI_USER } from '../support/dataplaneapi-testbed.js';
import { startProxy } from '../support/http-proxy.js';
import { type ServiceProcess, startServiceProcess } from '../support/service-process.js';
import { sniProbe } from '../support/tls.js';
import { waitFor } from '../support/wait.js';
import { type Harness, openTransactions, source, startHarness, versionUnderTest } from './harness.js';

describe.skipIf(!source)(`the service killed (-9) mid-apply, HAProxy ${versionUnderTest()}`, () => {
  let h: Harness;
  let dir: string;
  const children: ServiceProcess[] = [];

  beforeAll(async () => {
    h = await startHarness();
    dir = mkdtempSync(join(tmpdir(), 'kubebyon-crash-'));
  });
  afterAll(async () => {
    await Promise.all(children.map((c) => c.kill9()));
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
    // Nothing here talks to the service's API: what it does to the Data Plane API is watched instead.
    const serve = (url: string) =>
      startServiceProcess(env(url), 'a-long-enough-test-secret', { until: 'spawned' });
    const env = (url: string) => ({
      KUBEBYON_PROVIDER: 'dataplaneapi',
      KUBEBYON_DATAPLANE_URL: url,
      KUBEBYON_DATAPLANE_USERNAME: DPAPI_USER,
      KUBEBYON_DATAPLANE_PASSWORD: h.tb.password,
      KUBEBYON_DATAPLANE_RELOAD_TIMEOUT_MS: '10000',
      KUBEBYON_STATE_FILE: stateFile,
      KUBEBYON_HAPROXY_BIND_ADDR: `127.0.0.1:${h.sniPort}`,
      KUBEBYON_HAPROXY_DEFAULT_BACKEND: 'console_tls',
      KUBEBYON_STATIC_NODE_ADDRESSES: '127.0.0.1',
      KUBEBYON_RECONCILE_DEBOUNCE_MS: '50',
      KUBEBYON_LOG_LEVEL: 'warn',
    });
    let leaked: string[] = [];
    try {
      const first = await serve(proxy.url);
      children.push(first);
      await waitFor(() => commitSeen, 60_000, 'the service to send its commit');
      leaked = await openTransactions(h.tb);
      expect(leaked).toHaveLength(1);
      // The id was on disk before any write of the transaction.
      expect(JSON.parse(readFileSync(join(dir, LEDGER_FILE), 'utf8')).open).toEqual(leaked);
      await first.kill9();
      expect(await openTransactions(h.tb)).toEqual(leaked);
    } finally {
      await proxy.close();
    }

    const second = await serve(h.tb.url);
    children.push(second);
    await waitFor(
      () => sniProbe(h.sniPort, 'alpha.example.com', 1000),
      60_000,
      'alpha to be routed after the restart',
      {
        ok: (probe) => 'reached' in probe && probe.reached === 'alpha',
      },
    );
    // The leaked one is gone. What may be open is the one transaction the live service opened ahead of its
    // next change, listed in its ledger. (The commit's answer, and the ledger update after it, may trail the
    // reload that routes the traffic.)
    await waitFor(
      async () => {
        const open = await openTransactions(h.tb);
        const listed: string[] = existsSync(join(dir, LEDGER_FILE))
          ? JSON.parse(readFileSync(join(dir, LEDGER_FILE), 'utf8')).open
          : [];
        return open.length <= 1 && [...open].sort().join() === [...listed].sort().join();
      },
      10_000,
      'the ledger to list exactly what is open',
    );
    for (const id of leaked) expect(await openTransactions(h.tb)).not.toContain(id);
    // A graceful stop drops it too.
    await second.stop();
    expect(await openTransactions(h.tb)).toEqual([]);
  });
});
