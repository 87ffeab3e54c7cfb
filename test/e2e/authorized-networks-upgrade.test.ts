import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { haproxyVersionUnderTest } from '../support/haproxy-testbed.js';
import { LEGACY_ALLOW_CLUSTERS, writeLegacyAllowMapInstall } from '../support/legacy-allow-map-install.js';
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

// The upgrade to per-slot allow maps: an install the last release with one allow map (218dbda) made with two
// lists in use (u0: 127.0.0.1/32; u2: 198.18.0.0/24 and 127.0.0.1/32; u1 and u3 open), its owned file (the
// SNI frontend's `kb_allowed` lines), SNI map file, allow map file and state file exactly as that release's
// service wrote them (test/fixtures/legacy-allow-map), on a real HAProxy. The service of this release takes
// it over while every cluster is probed, from a source its list lets in and from one it leaves out: no
// restricted cluster may let the outsider in at any moment, no cluster may stop answering those it lets in.
// Measured: the reloads the upgrade takes (one: the guard moves into the slot backends), and those of a
// list change afterwards (none).
describe(`end to end, upgrade to per-slot allow maps from an install of 218dbda with lists, HAProxy ${haproxyVersionUnderTest()}`, () => {
  let e: E2eHaproxy;
  const servers: Record<string, NamedTlsServer> = {};
  let service: ServiceProcess | undefined;
  const OWNER = 'kubebyon-haproxy-adapter';

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

  it('never lets a left-out source in nor shuts out a listed one, reloads at most once, drops the old allow map, and a list change takes none', async () => {
    const owned = e.haproxy.owned;
    if (!owned) throw new Error('no owned file');
    const text = writeLegacyAllowMapInstall({
      dir: e.haproxy.dir,
      ownedFile: owned.path,
      stateFile: e.env().KUBEBYON_STATE_FILE as string,
      sniPort: e.sniPort,
      ports: { alpha: servers.alpha?.port ?? 0, beta: servers.beta?.port ?? 0 },
    });
    expect(text).toContain('acl kb_allowed');
    expect(text).toContain(`${OWNER}.allow.map`);
    expect(text).not.toContain('map_ip(');
    const oldAllowMap = join(e.haproxy.dir, `${OWNER}.allow.map`);
    expect(existsSync(oldAllowMap)).toBe(true);
    await owned.reloadWith(text);

    const cluster = (name: string) => {
      const c = LEGACY_ALLOW_CLUSTERS.find((x) => x.name === name);
      if (!c) throw new Error(`no cluster ${name}`);
      return c;
    };
    // `undefined` when `name`, from `localAddress`, reaches its own server; else why not.
    const reaches = async (name: string, localAddress: string) => {
      const c = cluster(name);
      const r = await sniProbe(e.sniPort, c.host, 5_000, { localAddress });
      return 'reached' in r && r.reached === c.server ? undefined : JSON.stringify(r);
    };
    // `undefined` when `name`, from `localAddress`, is refused (reaches no server); else what it reached.
    const refused = async (name: string, localAddress: string) => {
      const r = await sniProbe(e.sniPort, cluster(name).host, 5_000, { localAddress });
      return 'failed' in r ? undefined : `let in: ${JSON.stringify(r)}`;
    };
    await waitFor(
      async () =>
        (await reaches('u0', '127.0.0.1')) === undefined &&
        (await refused('u0', '127.0.0.2')) === undefined &&
        (await reaches('u1', '127.0.0.2')) === undefined,
      10_000,
      'the old install to enforce u0 (127.0.0.1 let in, 127.0.0.2 refused) and route u1 to all',
    );

    // Every check, round after round, from before the new service starts until it has upgraded the files.
    const checks: Record<string, () => Promise<string | undefined>> = {
      'u0 from 127.0.0.1 reaches': () => reaches('u0', '127.0.0.1'),
      'u0 from 127.0.0.2 refused': () => refused('u0', '127.0.0.2'),
      'u1 from 127.0.0.2 reaches': () => reaches('u1', '127.0.0.2'),
      'u2 from 127.0.0.1 reaches': () => reaches('u2', '127.0.0.1'),
      'u2 from 127.0.0.2 refused': () => refused('u2', '127.0.0.2'),
      'u3 from 127.0.0.2 reaches': () => reaches('u3', '127.0.0.2'),
    };
    for (const [what, check] of Object.entries(checks)) expect(await check(), what).toBeUndefined();
    const prober = startSniProber(
      Object.keys(checks),
      (what) => (checks[what] as () => Promise<string | undefined>)(),
      200_000,
    );
    let probed: Awaited<ReturnType<typeof prober.stop>>;
    let upgradeLoads = -1;
    let listed: Array<{ name: string; state: string; backend: string; authorized_networks: string[] }>;
    try {
      await prober.roundsFromNow(3);
      const before = await e.loads();
      service = await e.startService({ KUBEBYON_STATIC_NODE_ADDRESSES: '127.0.0.1' });
      expect((await service.client.request('POST', '/v1/reconcile?wait=true')).status).toBe(200);
      listed = (await service.client.request('GET', '/v1/clusters')).body.clusters as typeof listed;
      expect(listed.map((c) => [c.name, c.state, [...c.authorized_networks].sort()])).toEqual(
        LEGACY_ALLOW_CLUSTERS.map((c) => [c.name, 'applied', [...c.networks].sort()]),
      );
      await waitFor(() => readFileSync(owned.path, 'utf8'), 30_000, 'the owned file to guard the slots', {
        ok: (t) => t.includes('map_ip('),
      });
      await waitFor(() => !existsSync(oldAllowMap), 30_000, `${oldAllowMap} to be removed`);
      await prober.roundsFromNow(5);
      upgradeLoads = (await e.loads()) - before;
    } finally {
      probed = await prober.stop();
    }
    console.log(
      `[measure] upgrade from 218dbda with lists (stock, HAProxy ${haproxyVersionUnderTest()}): ${LEGACY_ALLOW_CLUSTERS.length} clusters, ${Object.keys(checks).length} checks a round, ${probed.probes} probes in ${probed.rounds} rounds over ${probed.ms} ms, ${probed.failures.length} failed; the upgrade reloaded ${upgradeLoads} time(s)`,
    );
    expect(probed.failures).toEqual([]);
    expect(upgradeLoads).toBeLessThanOrEqual(1);

    // The files: the old allow map gone, a map per slot instead, each holding its cluster's list.
    const newText = readFileSync(owned.path, 'utf8');
    expect(newText).not.toContain(`${OWNER}.allow.map`);
    expect(newText).not.toMatch(/concat\(\/\d+\|/);
    expect(existsSync(oldAllowMap)).toBe(false);
    const slotMap = (name: string) => {
      const backend = listed.find((c) => c.name === name)?.backend;
      expect(backend).toMatch(/^kubebyon_slot_0000\d$/);
      return join(e.haproxy.dir, `${OWNER}.allow.${backend}.map`);
    };
    const entries = (name: string) =>
      readFileSync(slotMap(name), 'utf8')
        .split('\n')
        .filter((l) => l && !l.startsWith('#'))
        .sort();
    for (const c of LEGACY_ALLOW_CLUSTERS) {
      expect(existsSync(slotMap(c.name)), slotMap(c.name)).toBe(true);
      expect(newText).toContain(`src,map_ip(${slotMap(c.name)}) -m str 1`);
    }
    expect(entries('u0')).toEqual(['127.0.0.1/32 1', '::/96 0', '::ffff:0.0.0.0/96 0'].sort());
    expect(entries('u1')).toEqual(['0.0.0.0/0 1', '::/0 1']);
    expect(entries('u2')).toEqual(
      ['127.0.0.1/32 1', '198.18.0.0/24 1', '::/96 0', '::ffff:0.0.0.0/96 0'].sort(),
    );
    expect(entries('u3')).toEqual(['0.0.0.0/0 1', '::/0 1']);

    // A list change on the upgraded install: a runtime change, no reload; the others stay as they were.
    const s = service as ServiceProcess;
    const loads = await e.loads();
    const u1 = cluster('u1');
    const res = await s.client.request('PUT', '/v1/clusters/u1?wait=true', {
      control_plane_host: u1.host,
      public_access_mode: 'loadbalancer',
      node_port: servers.beta?.port,
      authorized_networks: ['127.0.0.1/32'],
    });
    expect(res.status).toBe(200);
    await waitFor(
      async () =>
        (await reaches('u1', '127.0.0.1')) === undefined && (await refused('u1', '127.0.0.2')) === undefined,
      10_000,
      `${u1.host}: 127.0.0.1 let in, 127.0.0.2 closed`,
    );
    // u1 closed to 127.0.0.2 now; every other check holds as before.
    for (const [what, check] of Object.entries(checks))
      if (what !== 'u1 from 127.0.0.2 reaches') expect(await check(), what).toBeUndefined();
    expect(entries('u1')).toEqual(['127.0.0.1/32 1', '::/96 0', '::ffff:0.0.0.0/96 0'].sort());
    expect(await e.loads()).toBe(loads);
  }, 240_000);
});
