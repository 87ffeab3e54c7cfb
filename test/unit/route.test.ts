import { describe, expect, it } from 'vitest';
import { validateEndpoint } from '../../src/routes/endpoint.js';
import { type RouteClaim, resolveRoutes } from '../../src/routes/route.js';

const claim = (
  cluster: string,
  host: string,
  claimedAt: number,
  endpoints = [{ address: '10.0.0.1', port: 30443 }],
) => ({ cluster, host, claimedAt, endpoints }) satisfies RouteClaim;

describe('validateEndpoint', () => {
  it('accepts IPv4 and IPv6 with any valid port, canonicalising IPv6', () => {
    expect(validateEndpoint('10.0.0.1', 30443)).toEqual({
      ok: true,
      endpoint: { address: '10.0.0.1', port: 30443 },
    });
    expect(validateEndpoint('2001:DB8:0:0::1', 1)).toEqual({
      ok: true,
      endpoint: { address: '2001:db8::1', port: 1 },
    });
    expect(validateEndpoint('127.0.0.1', 65535).ok).toBe(true);
  });

  it.each([
    ['node-1', 30443, 'endpoint_address_invalid'],
    ['10.0.0.1 backup', 30443, 'endpoint_address_invalid'],
    ['[::1]', 30443, 'endpoint_address_invalid'],
    ['10.0.0.1', 0, 'endpoint_port_invalid'],
    ['10.0.0.1', 65536, 'endpoint_port_invalid'],
    ['10.0.0.1', 30443.5, 'endpoint_port_invalid'],
    ['10.0.0.1', Number.NaN, 'endpoint_port_invalid'],
  ])('rejects %j:%s with %s', (address, port, reason) => {
    expect(validateEndpoint(address, port)).toMatchObject({ ok: false, reason });
  });
});

describe('resolveRoutes', () => {
  it('gives a contested host to the older claim and names the owner in the rejection', () => {
    const result = resolveRoutes([
      claim('newer', 'api.example.com', 200),
      claim('older', 'API.example.com', 100),
    ]);
    expect(result.routes.map((r) => r.cluster)).toEqual(['older']);
    expect(result.rejected).toEqual([
      {
        cluster: 'newer',
        reason: 'host_claimed_by_other_cluster',
        detail: 'host api.example.com is already routed to cluster older',
      },
    ]);
  });

  it('breaks a tie in claim time by cluster id, whatever the input order', () => {
    const a = resolveRoutes([claim('b', 'x.example.com', 1), claim('a', 'x.example.com', 1)]);
    const b = resolveRoutes([claim('a', 'x.example.com', 1), claim('b', 'x.example.com', 1)]);
    expect(a).toEqual(b);
    expect(a.routes[0]?.cluster).toBe('a');
  });

  it('rejects IP literals, bad endpoints and bad cluster names with their reasons', () => {
    const result = resolveRoutes([
      claim('ip', '10.1.2.3', 1),
      claim('port', 'p.example.com', 1, [{ address: '10.0.0.1', port: 70000 }]),
      claim('bad name\n', 'n.example.com', 1),
    ]);
    expect(result.routes).toEqual([]);
    expect(result.rejected.map((r) => [r.cluster, r.reason])).toEqual([
      ['bad name\n', 'cluster_name_invalid'],
      ['ip', 'host_is_ip_literal'],
      ['port', 'endpoint_port_invalid'],
    ]);
  });

  it('keeps a route with no endpoints and reports it degraded', () => {
    const result = resolveRoutes([claim('empty', 'e.example.com', 1, []), claim('full', 'f.example.com', 1)]);
    expect(result.routes.map((r) => r.cluster)).toEqual(['empty', 'full']);
    expect(result.degraded).toEqual(['empty']);
  });

  it('sorts routes by host and de-duplicates endpoints', () => {
    const result = resolveRoutes([
      claim('z', 'b.example.com', 1, [
        { address: '10.0.0.2', port: 1 },
        { address: '10.0.0.1', port: 1 },
        { address: '10.0.0.2', port: 1 },
      ]),
      claim('y', 'a.example.com', 1),
    ]);
    expect(result.routes.map((r) => r.host)).toEqual(['a.example.com', 'b.example.com']);
    expect(result.routes[1]?.endpoints).toEqual([
      { address: '10.0.0.1', port: 1 },
      { address: '10.0.0.2', port: 1 },
    ]);
  });
});
