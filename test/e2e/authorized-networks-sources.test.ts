import { readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { afterAll, afterEach, beforeAll, describe, expect, it, onTestFailed } from 'vitest';
import { haproxyVersionUnderTest } from '../support/haproxy-testbed.js';
import type { ServiceProcess } from '../support/service-process.js';
import {
  type NamedTlsServer,
  proxyV2Header,
  type SniProbeOptions,
  sniProbe,
  startNamedTlsServer,
} from '../support/tls.js';
import { waitFor } from '../support/wait.js';
import { type E2eHaproxy, startE2eHaproxy } from './fixture.js';

// Authorized networks judged on the sources a user meets beyond IPv4 loopback: an IPv6 client (`::1`) on the
// bind a user writes for IPv6, `[::]:<port>` (HAProxy's IPv6 socket, which takes IPv4 clients too as
// ::ffff:a.b.c.d unless the host sets bindv6only), and the client's address a PROXY protocol v2 header
// carries (KUBEBYON_HAPROXY_ACCEPT_PROXY=true, a load balancer in front). Each by a real TLS handshake
// carrying the SNI, through the signed webhook, on one HAProxy; the service is started again between the two
// settings (the bind changes: one reload each time, lists then change with none).
const HOST = 'api.guarded.example.com';
const STATIC = { KUBEBYON_STATIC_NODE_ADDRESSES: '127.0.0.1' };

/** Why IPv6 loopback cannot be used here, or undefined when a socket binds and connects on `::1`. */
async function ipv6LoopbackMissing(): Promise<string | undefined> {
  return new Promise((resolve) => {
    const server = createServer();
    server.once('error', (err: NodeJS.ErrnoException) =>
      resolve(`no IPv6 loopback on this machine (binding ::1: ${err.code ?? err.message})`),
    );
    server.listen(0, '::1', () => server.close(() => resolve(undefined)));
  });
}
const noIpv6 = await ipv6LoopbackMissing();

describe(`end to end, authorized networks by IPv6 and PROXY protocol sources, HAProxy ${haproxyVersionUnderTest()}`, () => {
  let e: E2eHaproxy;
  let backend: NamedTlsServer;
  let service: ServiceProcess | undefined;
  const put = (networks: string[]) =>
    (service as ServiceProcess).client.request('PUT', '/v1/clusters/guarded?wait=true', {
      control_plane_host: HOST,
      public_access_mode: 'loadbalancer',
      node_port: backend.port,
      authorized_networks: networks,
    });
  const probe = (o: SniProbeOptions) => sniProbe(e.sniPort, HOST, 5000, o);
  /** Each client of `inside` reaches the backend, each of `outside` is closed, within 15 s. */
  const enforced = (inside: Record<string, SniProbeOptions>, outside: Record<string, SniProbeOptions>) =>
    waitFor(
      async () => {
        const seen: Record<string, string> = {};
        for (const [who, o] of Object.entries(inside)) {
          const r = await probe(o);
          if (!('reached' in r)) seen[who] = `refused (${r.failed})`;
        }
        for (const [who, o] of Object.entries(outside))
          if ('reached' in (await probe(o))) seen[who] = 'let in';
        return Object.keys(seen).length === 0 ? true : JSON.stringify(seen);
      },
      15_000,
      `${Object.keys(inside).join(', ') || 'nobody'} let in, ${Object.keys(outside).join(', ')} closed`,
      { ok: (v) => v === true, everyMs: 100 },
    );
  const ownedFile = () => readFileSync(e.haproxy.owned?.path ?? '', 'utf8');
  const restartService = async (extra: Record<string, string>) => {
    await service?.stop();
    service = await e.startService({ ...STATIC, ...extra });
  };

  beforeAll(async () => {
    backend = await startNamedTlsServer('guarded');
    e = await startE2eHaproxy();
  });
  afterEach(async () => {
    expect(await e.operatorServes()).toBe(true);
  });
  afterAll(async () => {
    await service?.stop();
    await e?.stop();
    await backend?.close();
  });

  describe.skipIf(noIpv6 !== undefined)(`IPv6 on a [::] bind${noIpv6 ? ` [skipped: ${noIpv6}]` : ''}`, () => {
    const v6 = { host: '::1', localAddress: '::1' };
    const v4 = { localAddress: '127.0.0.1' };
    const v4b = { localAddress: '127.0.0.2' };

    it('lets ::1 in by ::1/128, closes it when the list holds only IPv4, and judges IPv4 clients on the same bind', async () => {
      // What HAProxy logged and the frontend it ran, but for its 129 lookups, say why a source was judged so.
      onTestFailed(() => {
        console.log(e.haproxy.log().slice(-3000));
        console.log(
          ownedFile()
            .split('\n')
            .filter((l) => !/acl kb_allowed/.test(l))
            .join('\n')
            .slice(0, 3000),
        );
      });
      await restartService({ KUBEBYON_HAPROXY_BIND_ADDR: `[::]:${e.sniPort}` });
      expect(ownedFile()).toMatch(new RegExp(`bind (\\[::\\]|::):${e.sniPort}\\b`));
      expect((await put(['::1/128'])).status).toBe(200);
      await enforced({ '::1': v6 }, { '127.0.0.1': v4 });
      const loads = await e.loads();
      // Only IPv4: ::1 is closed, an IPv4 client (seen as ::ffff:127.0.0.1 on this socket) gets in.
      expect((await put(['127.0.0.1/32'])).status).toBe(200);
      await enforced({ '127.0.0.1': v4 }, { '::1': v6, '127.0.0.2': v4b });
      // Both families, and a wider IPv6 network holding ::1.
      expect((await put(['127.0.0.0/31', '::/64'])).status).toBe(200);
      await enforced({ '::1': v6, '127.0.0.1': v4 }, { '127.0.0.2': v4b });
      expect((await put(['0.0.0.0/0'])).status).toBe(200);
      await enforced({ '127.0.0.1': v4, '127.0.0.2': v4b }, { '::1': v6 });
      expect(await e.loads()).toBe(loads);
    });
  });

  describe('the PROXY protocol (accept-proxy)', () => {
    const claim = (address: string) =>
      proxyV2Header(
        { address, port: 40_000 },
        { address: address.includes(':') ? '2001:db8:34::1' : '198.18.0.1', port: e.sniPort },
      );
    const as = (address: string): SniProbeOptions => ({
      localAddress: '127.0.0.1',
      preamble: claim(address),
    });

    it('judges the source the header claims, IPv4 (family 0x11) and IPv6 (0x21), never the socket', async () => {
      await restartService({ KUBEBYON_HAPROXY_ACCEPT_PROXY: 'true' });
      expect(ownedFile()).toMatch(new RegExp(`bind 127\\.0\\.0\\.1:${e.sniPort} accept-proxy`));
      expect((await put(['198.18.0.0/24', '2001:db8:34::/48'])).status).toBe(200);
      await enforced(
        { '198.18.0.7 (claimed)': as('198.18.0.7'), '2001:db8:34::9 (claimed)': as('2001:db8:34::9') },
        {
          '198.18.1.7 (claimed)': as('198.18.1.7'),
          '2001:db8:35::9 (claimed)': as('2001:db8:35::9'),
          // No header at all: accept-proxy closes it, whatever the list.
          '127.0.0.1 without a header': { localAddress: '127.0.0.1' },
        },
      );
      // The socket's own source in the list changes nothing: the claim is what is judged.
      const loads = await e.loads();
      // The bare address (the same /32): a body unlike the IPv6 case's, whose signature a restarted service's
      // replay record still holds.
      const socketOnly = await put(['127.0.0.1']);
      expect(socketOnly.status, JSON.stringify(socketOnly.body)).toBe(200);
      await enforced(
        { '127.0.0.1 (claimed)': as('127.0.0.1') },
        { '198.18.0.7 (claimed)': as('198.18.0.7') },
      );
      expect(await e.loads()).toBe(loads);
      // HAProxy logs the claimed source of a refusal.
      await waitFor(
        () => /198\.18\.0\.7:40000 .*<NOSRV>.* PR.* api\.guarded\.example\.com/.test(e.haproxy.log()),
        10_000,
        'the refusal of the claimed 198.18.0.7 in HAProxy log',
      );
    });
  });
});
