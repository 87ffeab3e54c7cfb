import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  type HaproxyTestbed,
  haproxyVersionUnderTest,
  startHaproxyTestbed,
  unixSocketCommand,
} from '../support/haproxy-testbed.js';
import { freeLoopbackPort } from '../support/ports.js';
import { type NamedTlsServer, sniProbe, startNamedTlsServer } from '../support/tls.js';
import { waitFor } from '../support/wait.js';

// Pins the HAProxy behaviours a provider relies on, on each supported version: server address changes and
// dynamic servers through the runtime API without a reload, and a broken configuration that leaves the running
// one in place (the `haproxy` provider in src/providers/haproxy/ is built on them).
describe(`HAProxy ${haproxyVersionUnderTest()} runtime behaviour`, () => {
  let haproxy: HaproxyTestbed;
  let a: NamedTlsServer;
  let b: NamedTlsServer;
  let port: number;
  const config = (extra = '') => `global
  stats socket /etc/kubebyon/admin.sock mode 600 level admin
defaults
  mode tcp
  timeout connect 2s
  timeout client 10s
  timeout server 10s
frontend sni
  bind 127.0.0.1:${port}
  tcp-request inspect-delay 5s
  tcp-request content accept if { req.ssl_hello_type 1 }
  use_backend be_x if { req.ssl_sni -i x.example.com }
backend be_x
  server srv1 127.0.0.1:${a.port}
${extra}`;
  const admin = (command: string) => unixSocketCommand(join(haproxy.dir, 'admin.sock'), command);

  beforeAll(async () => {
    a = await startNamedTlsServer('a');
    b = await startNamedTlsServer('b');
    port = await freeLoopbackPort();
    haproxy = await startHaproxyTestbed(config());
  });
  afterAll(async () => {
    await haproxy?.stop();
    await a?.close();
    await b?.close();
  });

  it('moves a server to another address and port at runtime, without a reload', async () => {
    expect(await sniProbe(port, 'x.example.com')).toEqual({ reached: 'a' });
    const loads = haproxy.loadCount();
    expect(await admin(`set server be_x/srv1 addr 127.0.0.1 port ${b.port}`)).toMatch(/port changed from/);
    // Seen once on 3.0 with both cores half busy (stress-ng): the first connection after the answer still
    // reached the old address. So the new one is awaited (5 s at most), and no reload may be what moved it.
    await waitFor(() => sniProbe(port, 'x.example.com'), 5_000, 'the new address', {
      ok: (r) => JSON.stringify(r) === JSON.stringify({ reached: 'b' }),
    });
    expect(await sniProbe(port, 'x.example.com')).toEqual({ reached: 'b' });
    expect(haproxy.loadCount()).toBe(loads);
  });

  it('adds and deletes a server at runtime', async () => {
    expect(await admin(`add server be_x/srv2 127.0.0.1:${a.port}`)).toMatch(/New server registered/);
    await admin('disable server be_x/srv1');
    await admin('enable server be_x/srv2');
    expect(await sniProbe(port, 'x.example.com')).toEqual({ reached: 'a' });
    await admin('enable server be_x/srv1');
    await admin('disable server be_x/srv2');
    // The probe's connection through srv2 is closed on the client's side, but HAProxy refuses `del server`
    // ("still has connections attached") until it has let go of it too: seen once with both cores half busy.
    const deleted = await waitFor(() => admin('del server be_x/srv2'), 10_000, 'srv2 deleted', {
      ok: (r) => /Server deleted/.test(r),
    });
    expect(deleted).toMatch(/Server deleted/);
    expect(await sniProbe(port, 'x.example.com')).toEqual({ reached: 'b' });
  });

  it('keeps serving the running configuration when a reload is given a broken one', async () => {
    writeFileSync(haproxy.configPath, config('backend broken\n  server s1 127.0.0.1:notaport\n'));
    const loads = haproxy.loadCount();
    await haproxy.masterCli('reload');
    await sleep(1000);
    expect(haproxy.loadCount()).toBe(loads);
    expect(await sniProbe(port, 'x.example.com')).toEqual({ reached: 'b' });
  });
});
