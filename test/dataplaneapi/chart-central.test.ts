import { mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type EdgePod, startEdgePod } from '../support/chart-pod.js';
import { dataplaneSource } from '../support/dataplaneapi-testbed.js';
import { waitFor } from '../support/wait.js';
import { versionUnderTest } from './harness.js';

// The chart's central edge pod, run with docker as the kubelet would run it (test/support/chart-pod.ts): the
// HAProxy container the chart renders (its start script, base configuration and security settings: root,
// every capability dropped but NET_BIND_SERVICE, read-only root) starts HAProxy and its Data Plane API, and an
// adapter with the central Deployment's security settings drives that API until :443 routes. The image is the
// one given to this suite: KUBEBYON_TEST_DATAPLANEAPI_IMAGE (HAProxy's official image, as the chart names it),
// or the test bed's HAProxy with KUBEBYON_TEST_DATAPLANEAPI_BIN at the official image's paths.

const source = dataplaneSource();

describe.skipIf(!source || versionUnderTest() !== '3.0')(
  "the chart's central edge pod, as the kubelet runs it",
  () => {
    let pod: EdgePod;
    let dir: string;

    beforeAll(async () => {
      dir = mkdtempSync(join(tmpdir(), 'kubebyon-chart-central-'));
      const standIn =
        source?.kind === 'bin'
          ? (() => {
              // /usr/local/sbin/haproxy, as in the official image: the test bed's own binary.
              symlinkSync('/usr/sbin/haproxy', join(dir, 'haproxy'));
              return {
                haproxyImage: `kubebyon-testbed/haproxy:${versionUnderTest()}`,
                haproxyMounts: [
                  '-v',
                  `${dir}:/usr/local/sbin:ro`,
                  '-v',
                  `${source.path}:/usr/local/bin/dataplaneapi:ro`,
                ],
              };
            })()
          : source?.kind === 'image'
            ? { haproxyImage: source.image }
            : {};
      pod = await startEdgePod(`kubebyon-dpapi-chart-${process.pid}`, { args: [], ...standIn });
      await waitFor(() => pod.healthy(), 120_000, 'the adapter to answer');
    }, 240_000);
    afterAll(async () => {
      await pod?.stop();
      if (dir) rmSync(dir, { recursive: true, force: true });
    });

    it('starts HAProxy and its Data Plane API, which the adapter drives until :443 routes', async () => {
      expect(pod.central).toBe(true);
      const put = await waitFor(() => pod.put(), 120_000, 'a change applied through the Data Plane API', {
        ok: (p) => p.status === 200,
        everyMs: 2_000,
      });
      expect(put.body.state).toBe('applied');
      expect(put.ready).toBe(200);
      expect(await pod.accepts443()).toBe(true);
      expect(await pod.haproxyLog()).toMatch(/New program 'api' \(\d+\) forked/);
    }, 240_000);
  },
);
