import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { haproxyVersionUnderTest } from '../support/haproxy-testbed.js';
import type { ServiceProcess } from '../support/service-process.js';
import { type NamedTlsServer, sniProbe, startNamedTlsServer } from '../support/tls.js';
import { waitFor } from '../support/wait.js';
import { type E2eHaproxy, instancesSetting, startE2eHaproxy } from './fixture.js';

// Authorized networks on several stock HAProxy instances driven by one service (as test/e2e/instances.test.ts
// sets them up: each its own master socket, owned file and SNI port): every list change reaches every
// instance, with no reload on any, each proven by TLS handshakes carrying the SNI from chosen sources.
const HOST = 'api.guarded.example.com';
const INSTANCES = 3;

describe(`end to end, authorized networks on ${INSTANCES} stock HAProxy instances, HAProxy ${haproxyVersionUnderTest()}`, () => {
  const beds: E2eHaproxy[] = [];
  let backend: NamedTlsServer;
  let service: ServiceProcess | undefined;
  let n = 0;
  const put = (networks: string[]) =>
    (service as ServiceProcess).client.request('PUT', `/v1/clusters/guarded?wait=true&n=${n++}`, {
      control_plane_host: HOST,
      public_access_mode: 'loadbalancer',
      node_port: backend.port,
      authorized_networks: networks,
    });
  /** On every instance: each source of `inside` reaches the backend, each of `outside` is closed. */
  const everywhere = (inside: string[], outside: string[]) =>
    waitFor(
      async () => {
        for (const [i, bed] of beds.entries()) {
          const probe = (localAddress: string) => sniProbe(bed.sniPort, HOST, 5_000, { localAddress });
          for (const a of inside) if (!('reached' in (await probe(a)))) return `h${i}: ${a} refused`;
          for (const a of outside) if ('reached' in (await probe(a))) return `h${i}: ${a} let in`;
        }
        return true;
      },
      15_000,
      `every instance: ${inside.join(',')} let in, ${outside.join(',')} closed`,
      { ok: (v) => v === true, everyMs: 50 },
    );
  const loads = () => Promise.all(beds.map((b) => b.loads()));

  beforeAll(async () => {
    backend = await startNamedTlsServer('guarded');
    for (let i = 0; i < INSTANCES; i++) beds.push(await startE2eHaproxy());
    service = await (beds[0] as E2eHaproxy).startService({
      KUBEBYON_STATIC_NODE_ADDRESSES: '127.0.0.1',
      KUBEBYON_HAPROXY_INSTANCES: instancesSetting(beds),
    });
  });
  afterAll(async () => {
    await service?.stop();
    await Promise.all(beds.map((b) => b.stop()));
    await backend?.close();
  });

  it('every list change reaches every instance, with no reload', async () => {
    const first = await put(['127.0.0.1/32']);
    expect(first.status).toBe(200);
    expect((first.body.instances as Array<{ state: string }>).map((i) => i.state)).toEqual(
      beds.map(() => 'applied'),
    );
    await everywhere(['127.0.0.1'], ['127.0.0.2']);
    const before = await loads();
    for (const [inside, outside, list] of [
      [['127.0.0.2'], ['127.0.0.1'], ['127.0.0.2/32']],
      [['127.0.0.1', '127.0.0.2'], ['127.0.0.5'], ['127.0.0.0/30', '198.18.0.0/24']],
      [['127.0.0.5'], ['127.0.0.1'], ['127.0.0.4/30']],
      [['127.0.0.1', '127.0.0.5'], [], []],
    ] as const) {
      const res = await put([...list]);
      expect(res.status).toBe(200);
      await everywhere([...inside], [...outside]);
    }
    expect(await loads()).toEqual(before);
  });
});
