import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { haproxyVersionUnderTest } from '../support/haproxy-testbed.js';
import type { ServiceProcess } from '../support/service-process.js';
import { getVersion, startVersionServer, type VersionServer } from '../support/version-server.js';
import { waitFor } from '../support/wait.js';
import { type E2eHaproxy, startE2eHaproxy } from './fixture.js';

// Authorized networks as kubebyon-api sets them: through the signed webhook, enforced by HAProxy right after
// the ClientHello, changed with no reload, counted per cluster on /metrics and logged with the SNI. The
// sources are loopback addresses the client binds to (127.0.0.1 and 127.0.0.2).
const STATIC = { KUBEBYON_STATIC_NODE_ADDRESSES: '127.0.0.1' };
const HOST = 'api.guarded.example.com';
const OPEN = 'api.open.example.com';

describe(`end to end, authorized networks, HAProxy ${haproxyVersionUnderTest()}`, () => {
  let e: E2eHaproxy;
  let service: ServiceProcess | undefined;
  let api: VersionServer;
  const url = (host: string) => `https://${host}:${e.sniPort}`;
  const from = (host: string, localAddress: string) =>
    getVersion(url(host), { localAddress, timeoutMs: 3000 });
  const put = (name: string, host: string, networks?: string[]) =>
    (service as ServiceProcess).client.request('PUT', `/v1/clusters/${name}?wait=true`, {
      control_plane_host: host,
      public_access_mode: 'loadbalancer',
      node_port: api.port,
      ...(networks ? { authorized_networks: networks } : {}),
    });
  /** Every source in `in` reaches the cluster, every source in `out` is closed. */
  const enforced = (host: string, inside: string[], outside: string[]) =>
    waitFor(
      async () => {
        for (const a of inside) if (!('identity' in (await from(host, a)))) return false;
        for (const a of outside) if ('identity' in (await from(host, a))) return false;
        return true;
      },
      15_000,
      `${host}: ${inside.join(',')} let in, ${outside.join(',')} closed`,
      { everyMs: 100 },
    );

  beforeAll(async () => {
    api = await startVersionServer('vcluster');
    e = await startE2eHaproxy();
    service = await e.startService(STATIC);
  });
  afterEach(async () => {
    expect(await e.operatorServes()).toBe(true);
  });
  afterAll(async () => {
    await service?.stop();
    await e?.stop();
    await api?.close();
  });

  it('lets in only the listed sources, changes lists with no reload, and an open cluster stays open', async () => {
    expect((await put('open', OPEN)).status).toBe(200);
    const res = await put('guarded', HOST, ['127.0.0.1/32']);
    expect(res.status).toBe(200);
    expect(res.body.authorized_networks).toEqual(['127.0.0.1/32']);
    await enforced(HOST, ['127.0.0.1'], ['127.0.0.2']);
    await enforced(OPEN, ['127.0.0.1', '127.0.0.2'], []);
    const loads = await e.loads();
    // The other way round, then both, then open again: each a runtime change.
    expect((await put('guarded', HOST, ['127.0.0.2'])).status).toBe(200);
    await enforced(HOST, ['127.0.0.2'], ['127.0.0.1']);
    expect((await put('guarded', HOST, ['127.0.0.0/30'])).status).toBe(200);
    await enforced(HOST, ['127.0.0.1', '127.0.0.2'], ['127.0.0.5']);
    expect((await put('guarded', HOST, [])).status).toBe(200);
    await enforced(HOST, ['127.0.0.1', '127.0.0.5'], []);
    expect(await e.loads()).toBe(loads);
  });

  it('counts refusals per cluster on /metrics, and HAProxy logs the host and the source', async () => {
    expect((await put('guarded', HOST, ['127.0.0.1/32'])).status).toBe(200);
    await enforced(HOST, ['127.0.0.1'], ['127.0.0.3']);
    for (let i = 0; i < 3; i++) expect('identity' in (await from(HOST, '127.0.0.3'))).toBe(false);
    const line = await waitFor(
      async () => {
        const text = await (await fetch(`${(service as ServiceProcess).url}/metrics`)).text();
        const m = new RegExp(
          `kubebyon_haproxy_adapter_refused_connections\\{cluster="guarded",host="${HOST}"\\} (\\d+)`,
        ).exec(text);
        return m && Number(m[1]) >= 3 ? Number(m[1]) : undefined;
      },
      15_000,
      'the refusals on /metrics',
    );
    expect(line).toBeGreaterThanOrEqual(3);
    expect(e.haproxy.log()).toMatch(
      new RegExp(`127\\.0\\.0\\.3:\\d+ .*<NOSRV>.* PR.* ${HOST.replaceAll('.', '\\.')}`),
    );
  });

  it('refuses a bad list with the entry and the reason, and changes nothing', async () => {
    const client = (service as ServiceProcess).client;
    const before = (await client.request('GET', '/v1/clusters/guarded')).body;
    const res = await put('guarded', HOST, ['127.0.0.1/32', '198.18.0.5/24']);
    expect(res.status).toBe(422);
    expect(res.body).toMatchObject({ field: 'authorized_networks.1', reason: 'network_host_bits_set' });
    const after = (await client.request('GET', '/v1/clusters/guarded')).body;
    expect(after.authorized_networks).toEqual(before.authorized_networks);
  });

  it('never lets a slot freed by a restricted cluster carry its list to the next cluster that takes it', async () => {
    const client = (service as ServiceProcess).client;
    const slotOf = async (name: string) =>
      String((await client.request('GET', `/v1/clusters/${name}`)).body.backend);
    expect((await put('first', 'api.first.example.com', ['127.0.0.1/32'])).status).toBe(200);
    await enforced('api.first.example.com', ['127.0.0.1'], ['127.0.0.2']);
    const slot = await slotOf('first');
    expect((await client.request('DELETE', '/v1/clusters/first?wait=true')).status).toBe(200);
    // An open cluster takes the lowest free slot, the one just freed: everyone gets in.
    expect((await put('second', 'api.second.example.com')).status).toBe(200);
    expect(await slotOf('second')).toBe(slot);
    await enforced('api.second.example.com', ['127.0.0.1', '127.0.0.2'], []);
    // And a restricted one taking it has only its own list.
    expect((await client.request('DELETE', '/v1/clusters/second?wait=true')).status).toBe(200);
    expect((await put('third', 'api.third.example.com', ['127.0.0.2/32'])).status).toBe(200);
    expect(await slotOf('third')).toBe(slot);
    await enforced('api.third.example.com', ['127.0.0.2'], ['127.0.0.1']);
    expect((await client.request('DELETE', '/v1/clusters/third?wait=true')).status).toBe(200);
  });

  it('keeps every list through a restart of the service and a reload of HAProxy by someone else', async () => {
    expect((await put('guarded', HOST, ['127.0.0.2/32'])).status).toBe(200);
    await enforced(HOST, ['127.0.0.2'], ['127.0.0.1']);
    await service?.stop();
    await e.haproxy.masterCli('reload');
    await enforced(HOST, ['127.0.0.2'], ['127.0.0.1']);
    service = await e.startService(STATIC);
    await enforced(HOST, ['127.0.0.2'], ['127.0.0.1']);
  });
});
