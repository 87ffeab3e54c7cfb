import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'vitest';
import {
  type DataplaneTestbed,
  DPAPI_USER,
  foreignConfig,
  startDataplaneTestbed,
} from '../support/dataplaneapi-testbed.js';
import { describeInstances, docker } from '../support/instances-scenario.js';
import { freeLoopbackPort } from '../support/ports.js';
import { startServiceProcess } from '../support/service-process.js';
import { getVersion } from '../support/version-server.js';
import { waitFor } from '../support/wait.js';
import { source, versionUnderTest } from './harness.js';

// Several HAProxy instances, each behind its own Data Plane API, driven by one service with one loop each (the
// scenario is shared with test/e2e/instances.test.ts, stock HAProxy).
interface Bed {
  tb: DataplaneTestbed;
  sniPort: number;
}

// One set of credentials for every instance: the list gives each its URL only.
const password = `pw-${randomBytes(8).toString('hex')}`;
const secret = randomBytes(24).toString('hex');
let dir = '';
const answers = (bed: Bed) =>
  bed.tb.api.get('/services/haproxy/configuration/version', { timeout: 1_000 }).then(
    (res) => res.status === 200,
    () => false,
  );

describeInstances<Bed>({
  title: `several Data Plane API instances, HAProxy ${versionUnderTest()}`,
  skip: source ? undefined : 'no Data Plane API given',
  async startBeds() {
    dir = mkdtempSync(join(tmpdir(), 'kubebyon-dpapi-instances-'));
    const beds: Bed[] = [];
    for (let i = 0; i < 3; i++) {
      const config = foreignConfig({ consolePort: await freeLoopbackPort(), consoleBackendPort: 9 });
      const tb = await startDataplaneTestbed(
        source as NonNullable<typeof source>,
        versionUnderTest(),
        config,
        {
          password,
        },
      );
      beds.push({ tb, sniPort: await freeLoopbackPort() });
    }
    return beds;
  },
  async stopBeds(beds) {
    await Promise.all(beds.map((b) => b.tb.stop()));
    if (dir) rmSync(dir, { recursive: true, force: true });
  },
  startService: (beds, n, run) =>
    startServiceProcess(
      {
        KUBEBYON_PROVIDER: 'dataplaneapi',
        KUBEBYON_DATAPLANE_USERNAME: DPAPI_USER,
        KUBEBYON_DATAPLANE_PASSWORD: password,
        KUBEBYON_DATAPLANE_RELOAD_TIMEOUT_MS: '10000',
        KUBEBYON_STATIC_NODE_ADDRESSES: '127.0.0.1',
        KUBEBYON_STATE_FILE: join(dir, `run-${run}`, 'clusters.json'),
        KUBEBYON_PUBLIC_PORT: String((beds[0] as Bed).sniPort),
        KUBEBYON_RECONCILE_DEBOUNCE_MS: '20',
        KUBEBYON_RECONCILE_MAX_DELAY_MS: '200',
        KUBEBYON_LOG_LEVEL: 'info',
        KUBEBYON_HAPROXY_INSTANCES: JSON.stringify(
          beds
            .slice(0, n)
            .map((bed, i) => ({ name: `h${i}`, url: bed.tb.url, bind: `127.0.0.1:${bed.sniPort}` })),
        ),
      },
      secret,
      { until: 'readyz', startTimeoutMs: 60_000 },
    ),
  takeAway: async (bed) => {
    await docker('stop', '-t', '0', bed.tb.containerId);
  },
  // HAProxy is the container's entrypoint; its API is started beside it once HAProxy runs, as a supervisor
  // would (the test bed's `restart()`, split around the time away).
  async bringBack(bed) {
    await docker('start', bed.tb.containerId);
    await waitFor(
      () => bed.tb.masterCli('show proc').then((out) => out.includes('worker')),
      30_000,
      'HAProxy to run again',
      { everyMs: 20 },
    );
    // What HAProxy kept from its files alone (a route applied at runtime is written to them later).
    expect(await getVersion(`https://api.base.example.com:${bed.sniPort}`)).toEqual({
      identity: 'alpha',
      status: 200,
    });
    const polled = waitFor(() => answers(bed), 60_000, 'the Data Plane API to answer', { everyMs: 20 });
    await bed.tb.startApi();
    await polled;
  },
});
