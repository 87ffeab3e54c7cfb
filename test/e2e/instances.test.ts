import { haproxyVersionUnderTest } from '../support/haproxy-testbed.js';
import { describeInstances, docker } from '../support/instances-scenario.js';
import { waitFor } from '../support/wait.js';
import { type E2eHaproxy, instancesSetting, startE2eHaproxy } from './fixture.js';

// Several stock HAProxy instances driven by one service, each with its own loop (the scenario is shared with
// test/dataplaneapi/instances.test.ts): each instance has its own master socket, owned file, `haproxy -c` and
// SNI port, since they share this host.
type Bed = E2eHaproxy & { sniPort: number };

describeInstances<Bed>({
  title: `end to end, several stock HAProxy instances, HAProxy ${haproxyVersionUnderTest()}`,
  async startBeds() {
    const beds: Bed[] = [];
    for (let i = 0; i < 3; i++) beds.push(await startE2eHaproxy());
    return beds;
  },
  stopBeds: (beds) => Promise.all(beds.map((b) => b.stop())).then(() => {}),
  startService: (beds, n) =>
    (beds[0] as Bed).startService({
      KUBEBYON_STATIC_NODE_ADDRESSES: '127.0.0.1',
      KUBEBYON_HAPROXY_INSTANCES: instancesSetting(beds.slice(0, n)),
    }),
  takeAway: async (bed) => {
    await docker('stop', '-t', '0', bed.haproxy.containerId);
  },
  async bringBack(bed) {
    await docker('start', bed.haproxy.containerId);
    await waitFor(
      () => bed.haproxy.masterCli('show proc').then((out) => out.includes('worker')),
      30_000,
      'HAProxy to run again',
      { everyMs: 20 },
    );
  },
});
