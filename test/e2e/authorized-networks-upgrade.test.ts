import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { haproxyVersionUnderTest } from '../support/haproxy-testbed.js';
import { LEGACY_MAP_CLUSTERS, writeLegacyMapInstall } from '../support/legacy-map-install.js';
import type { ServiceProcess } from '../support/service-process.js';
import { startSniProber } from '../support/sni-prober.js';
import { type NamedTlsServer, sniProbe, startNamedTlsServer } from '../support/tls.js';
import { waitFor } from '../support/wait.js';
import { type E2eHaproxy, startE2eHaproxy } from './fixture.js';

// The upgrade to authorized networks: an install the release before them (a653034) made with map routing,
// its owned file, SNI map file and state file exactly as that release's service wrote them
// (test/fixtures/legacy-map), routing four clusters on a real HAProxy. The service of this release takes it
// over while every cluster is probed by SNI, then the install accepts its first list. Measured: the reloads
// the upgrade itself takes (one to add the guard's lines is expected: README "Authorized networks"), and
// those of the first list (none).
describe(`end to end, upgrade to authorized networks from a map-routing install of a653034, HAProxy ${haproxyVersionUnderTest()}`, () => {
  let e: E2eHaproxy;
  const servers: Record<string, NamedTlsServer> = {};
  let service: ServiceProcess | undefined;

  beforeAll(async () => {
    servers.alpha = await startNamedTlsServer('alpha');
    servers.beta = await startNamedTlsServer('beta');
    e = await startE2eHaproxy();
  });
  afterAll(async () => {
    await service?.stop();
    await e?.stop();
    await Promise.all(Object.values(servers).map((s) => s.close()));
  });

  it('keeps every route open through the upgrade, which reloads at most once, and the first list takes none', async () => {
    const owned = e.haproxy.owned;
    if (!owned) throw new Error('no owned file');
    const text = writeLegacyMapInstall({
      dir: e.haproxy.dir,
      ownedFile: owned.path,
      stateFile: e.env().KUBEBYON_STATE_FILE as string,
      sniPort: e.sniPort,
      ports: { alpha: servers.alpha?.port ?? 0, beta: servers.beta?.port ?? 0 },
    });
    expect(text).not.toMatch(/kb_allowed|allow\.map/);
    await owned.reloadWith(text);
    const reaches = async (host: string, localAddress = '127.0.0.2') => {
      const want = LEGACY_MAP_CLUSTERS.find((c) => c.host === host)?.server;
      const r = await sniProbe(e.sniPort, host, 5_000, { localAddress });
      return 'reached' in r && r.reached === want ? undefined : JSON.stringify(r);
    };
    for (const c of LEGACY_MAP_CLUSTERS)
      await waitFor(
        async () => (await reaches(c.host)) === undefined,
        10_000,
        `${c.host} on the old install`,
      );

    // From 127.0.0.2, which the first list below leaves out only for u0: every cluster, round after round,
    // from before the new service starts until it has upgraded the files.
    const prober = startSniProber(
      LEGACY_MAP_CLUSTERS.map((c) => c.host),
      (host) => reaches(host),
      180_000,
    );
    let probed: Awaited<ReturnType<typeof prober.stop>>;
    let upgradeLoads = -1;
    try {
      await prober.roundsFromNow(3);
      const before = await e.loads();
      service = await e.startService({ KUBEBYON_STATIC_NODE_ADDRESSES: '127.0.0.1' });
      expect((await service.client.request('POST', '/v1/reconcile?wait=true')).status).toBe(200);
      const listed = await service.client.request('GET', '/v1/clusters');
      expect(
        (listed.body.clusters as Array<{ name: string; state: string }>).map((c) => [c.name, c.state]),
      ).toEqual(LEGACY_MAP_CLUSTERS.map((c) => [c.name, 'applied']));
      await waitFor(() => readFileSync(owned.path, 'utf8'), 10_000, 'the owned file to carry the guard', {
        ok: (t) => t.includes('kb_allowed'),
      });
      await prober.roundsFromNow(5);
      upgradeLoads = (await e.loads()) - before;
    } finally {
      probed = await prober.stop();
    }
    console.log(
      `[measure] upgrade from a653034 map routing (stock, HAProxy ${haproxyVersionUnderTest()}): ${LEGACY_MAP_CLUSTERS.length} clusters, ${probed.probes} probes in ${probed.rounds} rounds over ${probed.ms} ms, ${probed.failures.length} failed; the upgrade reloaded ${upgradeLoads} time(s)`,
    );
    expect(probed.failures).toEqual([]);
    expect(upgradeLoads).toBeLessThanOrEqual(1);

    // The first list: a runtime change, no reload; the other clusters stay open to all.
    const s = service as ServiceProcess;
    const loads = await e.loads();
    const u0 = LEGACY_MAP_CLUSTERS[0];
    const res = await s.client.request('PUT', '/v1/clusters/u0?wait=true', {
      control_plane_host: u0.host,
      public_access_mode: 'loadbalancer',
      node_port: servers.alpha?.port,
      authorized_networks: ['127.0.0.1/32'],
    });
    expect(res.status).toBe(200);
    await waitFor(
      async () =>
        (await reaches(u0.host, '127.0.0.1')) === undefined &&
        (await reaches(u0.host, '127.0.0.2')) !== undefined,
      10_000,
      `${u0.host}: 127.0.0.1 let in, 127.0.0.2 closed`,
    );
    for (const c of LEGACY_MAP_CLUSTERS.slice(1)) expect(await reaches(c.host)).toBeUndefined();
    expect(await e.loads()).toBe(loads);
  }, 240_000);
});
