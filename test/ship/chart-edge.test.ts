import { afterAll, describe, expect, it } from 'vitest';
import { type EdgePod, startEdgePod } from '../support/chart-pod.js';
import { waitFor } from '../support/wait.js';

// The chart's sidecar edge pod, run with docker as the kubelet would run it (test/support/chart-pod.ts): the
// two containers the chart renders, with its files and security settings, sharing the emptyDir, ports below
// 1024 privileged as on a node. With the chart's default HAProxy binds :443 and a change is applied through
// the shared folder; without NET_BIND_SERVICE, or as non-root, the bind is refused and the cluster's reason
// says so (runbook 8.4).

const PREFIX = `kubebyon-ship-chart-${process.pid}`;

describe("the chart's sidecar edge pod, as the kubelet runs it", () => {
  const pods: EdgePod[] = [];
  const start = async (variant: string, args: string[]) => {
    const pod = await startEdgePod(`${PREFIX}-${variant}`, { args: ['--set', 'mode=sidecar', ...args] });
    pods.push(pod);
    await waitFor(() => pod.healthy(), 120_000, `the ${variant} adapter to answer`);
    return pod;
  };

  afterAll(async () => {
    for (const pod of pods) await pod.stop();
  });

  it('binds :443 with the default securityContext and applies a change through the shared folder', async () => {
    const pod = await start('default', []);
    const put = await pod.put();
    expect(put.status, JSON.stringify(put.body)).toBe(200);
    expect(put.body.state).toBe('applied');
    expect(put.ready).toBe(200);
    expect(await pod.accepts443()).toBe(true);
  }, 240_000);

  it.each([
    ['without NET_BIND_SERVICE', 'nocap', ['--set', 'edge.securityContext.capabilities.add=null']],
    ['as a non-root user', 'nonroot', ['--set', 'edge.securityContext.runAsUser=1000']],
  ])(
    'says "Permission denied" plainly when HAProxy runs %s (runbook 8.4)',
    async (_how, variant, args) => {
      const pod = await start(variant, args);
      const put = await pod.put();
      expect(put.status).toBe(502);
      expect(put.body.state).toBe('error');
      expect(put.body.reason).toMatch(
        /^HAProxy refused the new configuration and keeps the previous one: .*cannot bind socket \(Permission denied\) for \[0\.0\.0\.0:443\]/,
      );
      // Not ready (its HAProxy lacks the change): the pod leaves the webhook Service.
      expect(put.ready).toBe(503);
      expect(await pod.accepts443()).toBe(false);
      expect(await pod.haproxyLog()).toMatch(
        /cannot bind socket \(Permission denied\) for \[0\.0\.0\.0:443\]/,
      );
    },
    240_000,
  );
});
