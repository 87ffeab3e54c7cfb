import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  type HaproxyTestbed,
  haproxyVersionUnderTest,
  startHaproxyTestbed,
} from '../support/haproxy-testbed.js';
import { freeLoopbackPort } from '../support/ports.js';
import { type NamedTlsServer, sniProbe, startNamedTlsServer } from '../support/tls.js';

// Proves the test bed itself: a real HAProxy from Debian's packages routes real TLS handshakes by SNI,
// closes unknown SNI, and reloads through the master CLI. Later suites build on these guarantees.
function sniConfig(adminSocket: string, frontendPort: number, routes: Array<[string, number]>): string {
  const lines = [
    'global',
    `  stats socket ${adminSocket} mode 600 level admin`,
    'defaults',
    '  mode tcp',
    '  timeout connect 2s',
    '  timeout client 10s',
    '  timeout server 10s',
    'frontend sni',
    `  bind 127.0.0.1:${frontendPort}`,
    '  tcp-request inspect-delay 5s',
    '  tcp-request content accept if { req.ssl_hello_type 1 }',
    ...routes.map((_, i) => `  use_backend be${i} if { req.ssl_sni -i ${routes[i]?.[0]} }`),
    ...routes.flatMap(([, port], i) => [`backend be${i}`, `  server s0 127.0.0.1:${port}`]),
  ];
  return `${lines.join('\n')}\n`;
}

describe(`HAProxy ${haproxyVersionUnderTest()} test bed`, () => {
  let haproxy: HaproxyTestbed;
  let alpha: NamedTlsServer;
  let beta: NamedTlsServer;
  let port: number;

  beforeAll(async () => {
    alpha = await startNamedTlsServer('alpha');
    beta = await startNamedTlsServer('beta');
    port = await freeLoopbackPort();
    haproxy = await startHaproxyTestbed(
      sniConfig('/etc/kubebyon/admin.sock', port, [['alpha.example.test', alpha.port]]),
    );
  });

  afterAll(async () => {
    await haproxy?.stop();
    await alpha?.close();
    await beta?.close();
  });

  it('runs the HAProxy version that was asked for', async () => {
    const answer = await haproxy.masterCli('show version');
    expect(answer).toMatch(new RegExp(`^${haproxy.version.replace('.', '\\.')}\\.`, 'm'));
  });

  it('routes a TLS handshake by SNI, case-insensitively, and passes the SNI through', async () => {
    expect(await sniProbe(port, 'alpha.example.test')).toEqual({ reached: 'alpha' });
    expect(await sniProbe(port, 'ALPHA.Example.TEST')).toEqual({ reached: 'alpha' });
    expect(alpha.seenServernames).toContain('alpha.example.test');
  });

  it('closes a handshake whose SNI matches no route', async () => {
    const result = await sniProbe(port, 'unknown.example.test');
    expect(result).not.toHaveProperty('reached');
  });

  it('reloads a new configuration through the master socket', async () => {
    const loadsBefore = haproxy.loadCount();
    await haproxy.reloadWith(
      sniConfig('/etc/kubebyon/admin.sock', port, [
        ['alpha.example.test', beta.port],
        ['beta.example.test', beta.port],
      ]),
    );
    expect(haproxy.loadCount()).toBe(loadsBefore + 1);
    expect(await sniProbe(port, 'beta.example.test')).toEqual({ reached: 'beta' });
    expect(await sniProbe(port, 'alpha.example.test')).toEqual({ reached: 'beta' });
  });
});
