import { readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { connect, type TLSSocket } from 'node:tls';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { DEFAULT_RENDER_OPTIONS } from '../../src/haproxy/render.js';
import { parseMapFile } from '../../src/providers/haproxy/map-file.js';
import { parseOwnedFile } from '../../src/providers/haproxy/owned-file-parse.js';
import { Registry } from '../../src/registry/registry.js';
import { ClusterStore } from '../../src/store/cluster-store.js';
import { haproxyVersionUnderTest } from '../support/haproxy-testbed.js';
import { legacyRulesFile } from '../support/legacy-stock-file.js';
import type { ServiceProcess } from '../support/service-process.js';
import { startSniProber } from '../support/sni-prober.js';
import {
  getVersion,
  startVersionServer,
  type VersionServer,
  waitForIdentity,
} from '../support/version-server.js';
import { waitFor } from '../support/wait.js';
import { type E2eHaproxy, startE2eHaproxy } from './fixture.js';

// Map routing as it ships: after the first pass, clusters come, move and go through the runtime API only —
// HAProxy's own load count proves no reload — and every claim is checked by a TLS handshake carrying SNI.
const MAP = { KUBEBYON_STATIC_NODE_ADDRESSES: '127.0.0.1' };

describe(`end to end, map routing without reloads, HAProxy ${haproxyVersionUnderTest()}`, () => {
  let e: E2eHaproxy;
  let service: ServiceProcess | undefined;
  const servers: Record<string, VersionServer> = {};
  const endpoint = (host: string) => `https://${host}:${e.sniPort}`;
  const body = (host: string, server: string) => ({
    control_plane_host: host,
    public_access_mode: 'loadbalancer',
    node_port: servers[server]?.port ?? 0,
  });
  const put = (name: string, host: string, server: string) =>
    (service as ServiceProcess).client.request('PUT', `/v1/clusters/${name}?wait=true`, body(host, server));
  const closed = (host: string) => waitForIdentity(endpoint(host), null);
  const workers = async () =>
    (await e.haproxy.masterCli('show proc')).split('\n').filter((l) => / worker /.test(l)).length;

  beforeAll(async () => {
    for (const name of ['alpha', 'beta']) servers[name] = await startVersionServer(name);
    e = await startE2eHaproxy();
  });
  afterAll(async () => {
    await service?.stop();
    await e?.stop();
    await Promise.all(Object.values(servers).map((s) => s.close()));
  });
  let round = 0;
  beforeEach(async () => {
    service = await e.startService(MAP);
    // A distinct query each round: the same signed request twice within its clock window is a replay (401).
    const res = await service.client.request('PUT', `/v1/clusters?wait=true&round=${round++}`, {
      clusters: [],
    });
    expect(res.status).toBe(200);
  });
  afterEach(async () => {
    await service?.stop();
    service = undefined;
    expect(await e.operatorServes()).toBe(true);
  });

  it('adds, moves and deletes clusters with no reload, each proven by SNI', async () => {
    const loads = await e.loads();
    for (const n of [1, 2, 3]) {
      expect((await put(`c${n}`, `api.c${n}.example.com`, 'alpha')).status).toBe(200);
      expect(await waitForIdentity(endpoint(`api.c${n}.example.com`), 'alpha')).toEqual({
        identity: 'alpha',
        status: 200,
      });
    }
    expect((await put('c2', 'api.c2.example.com', 'beta')).status).toBe(200);
    expect(await waitForIdentity(endpoint('api.c2.example.com'), 'beta')).toEqual({
      identity: 'beta',
      status: 200,
    });
    // Any case of the SNI reaches the route: the frontend lower-cases before the map lookup.
    expect(await waitForIdentity(endpoint('API.C1.Example.COM'), 'alpha')).toEqual({
      identity: 'alpha',
      status: 200,
    });
    expect((await service?.client.request('DELETE', '/v1/clusters/c3?wait=true'))?.status).toBe(200);
    await closed('api.c3.example.com');
    expect(await e.loads()).toBe(loads);
  });

  it('keeps a held TLS stream open through 100 changes of other clusters, with one worker left', async () => {
    expect((await put('held', 'api.held.example.com', 'alpha')).status).toBe(200);
    await waitForIdentity(endpoint('api.held.example.com'), 'alpha');
    const loads = await e.loads();
    const stream: TLSSocket = connect({
      host: '127.0.0.1',
      port: e.sniPort,
      servername: 'api.held.example.com',
      rejectUnauthorized: false,
    });
    let streamClosed = false;
    stream.on('close', () => {
      streamClosed = true;
    });
    stream.on('error', () => {});
    await new Promise<void>((resolve) => stream.once('secureConnect', () => resolve()));
    for (let i = 0; i < 50; i++)
      expect((await put(`w${i}`, `api.w${i}.example.com`, 'beta')).status).toBe(200);
    for (let i = 0; i < 50; i++)
      expect((await service?.client.request('DELETE', `/v1/clusters/w${i}?wait=true`))?.status).toBe(200);
    expect(streamClosed).toBe(false);
    expect(await e.loads()).toBe(loads);
    expect(await workers()).toBe(1);
    stream.destroy();
  });

  it('repairs a map entry deleted by hand at runtime on the next resync', async () => {
    await service?.stop();
    service = await e.startService({ ...MAP, KUBEBYON_RESYNC_INTERVAL_MS: '1000' });
    expect((await put('hand', 'api.hand.example.com', 'alpha')).status).toBe(200);
    await waitForIdentity(endpoint('api.hand.example.com'), 'alpha');
    const map = (await e.haproxy.masterCli('@1 show map')).split('\n').find((l) => l.includes('.sni.map'));
    const path = /([^\s()]+\.sni\.map)/.exec(map ?? '')?.[1];
    expect(path).toBeDefined();
    expect(await e.haproxy.masterCli(`@1 del map ${path} api.hand.example.com`)).not.toMatch(
      /not found|unknown/i,
    );
    expect(await waitForIdentity(endpoint('api.hand.example.com'), 'alpha', { timeoutMs: 5_000 })).toEqual({
      identity: 'alpha',
      status: 200,
    });
  });

  it('takes over an install of the release before map routing (rules) with one reload, every cluster answering by SNI throughout', async () => {
    await service?.stop();
    service = undefined;
    // What the previous release left, run with KUBEBYON_HAPROXY_ROUTING=rules: its store, and its owned file
    // (one backend and one SNI rule per cluster, checked servers, no map), which HAProxy runs.
    const n = 16;
    const names = Array.from({ length: n }, (_, i) => `u${i}`);
    const serverOf = (i: number) => (i % 2 === 0 ? 'alpha' : 'beta');
    const hostOf = (name: string) => `api.${name}.example.com`;
    const store = await ClusterStore.open(e.env().KUBEBYON_STATE_FILE as string);
    await store.replaceAll(
      names.map((name, i) => ({
        name,
        host: hostOf(name),
        target: { nodePort: servers[serverOf(i)]?.port ?? 0 },
      })),
    );
    const owned = e.haproxy.owned;
    if (!owned) throw new Error('no owned file');
    const mapFile = join(e.haproxy.dir, DEFAULT_RENDER_OPTIONS.sniMap);
    rmSync(mapFile, { force: true });
    const legacy = legacyRulesFile(
      names.map((name, i) => ({
        cluster: name,
        host: hostOf(name),
        endpoints: [{ address: '127.0.0.1', port: servers[serverOf(i)]?.port ?? 0 }],
      })),
      {
        owner: new Registry(),
        bind: { address: '127.0.0.1', port: e.sniPort },
        healthChecks: true,
        mapDir: e.haproxy.dir,
      },
    );
    await owned.reloadWith(legacy);
    for (const [i, name] of names.entries())
      expect(await waitForIdentity(endpoint(hostOf(name)), serverOf(i))).toEqual({
        identity: serverOf(i),
        status: 200,
      });

    // Every cluster, again and again, a TLS handshake carrying its SNI and a GET /version: from before the new
    // service starts until after it has moved everything to the map and written its files.
    const prober = startSniProber(
      names.map(hostOf),
      async (host) => {
        const answer = await getVersion(endpoint(host));
        const want = serverOf(names.indexOf(/^api\.(u[0-9]+)\./.exec(host)?.[1] ?? ''));
        return 'identity' in answer && answer.identity === want ? undefined : JSON.stringify(answer);
      },
      240_000,
    );
    let probed: Awaited<ReturnType<typeof prober.stop>>;
    let started = 0;
    try {
      await prober.roundsFromNow(3);
      const loads = await e.loads();
      // The new release, started with the environment the old one had: the retired setting is ignored,
      // with one warning.
      started = Date.now();
      service = await e.startService({ ...MAP, KUBEBYON_HAPROXY_ROUTING: 'rules' });
      expect(service.output()).toMatch(/KUBEBYON_HAPROXY_ROUTING is no longer read/);
      expect((await service.client.request('POST', '/v1/reconcile?wait=true')).status).toBe(200);
      const listed = await service.client.request('GET', '/v1/clusters');
      expect((listed.body.clusters as Array<{ state: string }>).map((c) => c.state)).toEqual(
        names.map(() => 'applied'),
      );
      await waitFor(() => readFileSync(mapFile, 'utf8'), 5_000, 'the map file to name every host', {
        ok: (text) => parseMapFile(text).size === n,
      });
      await prober.roundsFromNow(5);
      expect(await e.loads()).toBe(loads + 1);
    } finally {
      probed = await prober.stop();
    }
    console.log(
      `[measure] upgrade from rules (stock, ${haproxyVersionUnderTest()}): ${n} clusters, ${probed.probes} probes in ${probed.rounds} rounds over ${probed.ms} ms (service started ${started ? Date.now() - started : 0} ms before the end), ${probed.failures.length} failed`,
    );
    expect(probed.failures).toEqual([]);

    // The files hold the map layout only.
    const file = readFileSync(owned.path, 'utf8');
    expect(file).not.toMatch(/req\.ssl_sni -i/);
    expect(file).toContain(`use_backend %[req.ssl_sni,lower,map(${mapFile})]`);
    const parsed = parseOwnedFile(file, undefined, e.haproxy.dir).state;
    expect(parsed.frontends.map((f) => f.rules.length)).toEqual([0]);
    // Slots and the guard's refusals table only (src/haproxy/edge.ts).
    expect(
      parsed.backends.filter((b) => !/^kubebyon_slot_[0-9]{5,}$/.test(b.name)).map((b) => b.name),
    ).toEqual(['kubebyon_refusals']);
    expect([...parseMapFile(readFileSync(mapFile, 'utf8')).keys()].sort()).toEqual(names.map(hostOf).sort());
  }, 240_000);
});
