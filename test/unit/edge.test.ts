import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { allowKeys, isAllowKey } from '../../src/haproxy/allow-keys.js';
import { type Edge, edgeLines, parseShowTable, readEdge } from '../../src/haproxy/edge.js';
import { PROPERTY_TIMEOUT_MS } from '../support/property.js';

const FILES = { sniMap: '/etc/haproxy/o.sni.map', allowMap: '/etc/haproxy/o.allow.map' };
const nameOf = (file: string) => (file.startsWith('/etc/haproxy/') ? file.slice(13) : undefined);

const edgeArb: fc.Arbitrary<Edge> = fc.record({
  maxConn: fc.constantFrom(0, 100, 8000),
  perSource: fc.option(
    fc.record({
      maxConn: fc.constantFrom(0, 10, 500),
      maxRate: fc.constantFrom(0, 20, 1000),
      tableSize: fc.constantFrom(1000, 100_000),
    }),
    { nil: null },
  ),
  rejectUnknown: fc.boolean(),
  allowMap: fc.constant('o.allow.map'),
  refusals: fc.constantFrom('kubebyon_refusals', 'stg_refusals'),
});

describe('the SNI frontend guard', () => {
  it('reads back every guard it writes, and no guard from lines changed or missing', {
    timeout: PROPERTY_TIMEOUT_MS,
  }, () => {
    fc.assert(
      fc.property(edgeArb, fc.integer({ min: 100, max: 30_000 }), fc.nat(), (edge, delay, pick) => {
        const lines = edgeLines(edge, delay, FILES);
        const read = readEdge(lines, nameOf);
        expect(read).toEqual({ inspectDelayMs: delay, acceptsTlsHello: true, edge });
        // A line gone (a hand edit, a partial write): not this guard, so the next plan writes it again.
        const cut = [...lines.slice(0, pick % lines.length), ...lines.slice((pick % lines.length) + 1)];
        expect(readEdge(cut, nameOf).edge).not.toEqual(edge);
        // A line too many of the guard's kinds: no guard either.
        expect(readEdge([...lines, 'tcp-request content reject'], nameOf).edge).toBeNull();
      }),
      { numRuns: 200 },
    );
  });

  it('reads the stick table back as the Data Plane API rewrites it, and the old body as no guard', () => {
    const edge: Edge = {
      maxConn: 8000,
      perSource: { maxConn: 500, maxRate: 1000, tableSize: 102_400 },
      rejectUnknown: true,
      allowMap: 'o.allow.map',
      refusals: 'kubebyon_refusals',
    };
    const rewritten = edgeLines(edge, 5000, FILES).map((l) =>
      l.startsWith('stick-table')
        ? 'stick-table type ipv6 size 100k expire 1m store conn_cur,conn_rate(10s)'
        : l,
    );
    expect(readEdge(rewritten, nameOf).edge).toEqual(edge);
    // What every release before the guard wrote.
    expect(
      readEdge(
        ['tcp-request inspect-delay 5000ms', 'tcp-request content accept if { req.ssl_hello_type 1 }'],
        nameOf,
      ),
    ).toEqual({ inspectDelayMs: 5000, acceptsTlsHello: true, edge: null });
  });

  it('refuses a number that is not a count', () => {
    const bad = { maxConn: -1, perSource: null, rejectUnknown: true, allowMap: 'm', refusals: 'r' };
    expect(() => edgeLines(bad, 5000, FILES)).toThrow(RangeError);
    expect(() => edgeLines({ ...bad, maxConn: 1 }, Number.NaN, FILES)).toThrow(RangeError);
  });

  it('writes a flag and one key per network, each one HAProxy can be sent', () => {
    expect(allowKeys('kubebyon_slot_00007', [], true)).toEqual([]);
    const keys = allowKeys('kubebyon_slot_00007', ['198.18.0.0/15', '2001:db8::/32'], true);
    expect(keys).toEqual([
      'kubebyon_slot_00007',
      '198.18.0.0/15|kubebyon_slot_00007',
      '::ffff:198.18.0.0/111|kubebyon_slot_00007',
      '2001:db8::/32|kubebyon_slot_00007',
    ]);
    for (const k of keys) expect(isAllowKey(k), k).toBe(true);
    // ::1 is judged by its exact key (HAProxy 3.0+ reads a source in ::/96 as IPv4): a wider IPv6 network
    // holding it brings that key, once; one that does not hold it, none.
    expect(allowKeys('s', ['::/0', '::1/128', '::/64', '2001:db8::/32'], false)).toEqual([
      's',
      '::/0|s',
      '::1/128|s',
      '::/64|s',
      '2001:db8::/32|s',
    ]);
    expect(allowKeys('s', ['::2/127', '10.0.0.0/8'], false)).toEqual(['s', '::2/127|s', '10.0.0.0/8|s']);
    for (const bad of [
      '',
      '198.18.0.1/15|kubebyon_slot_1',
      '198.18.0.0/15|a b',
      '198.18.0.0/15;del map x|s',
      '2001:DB8::/32|s',
      '::ffff:198.18.0.0/95|s',
      'a b',
      '010.0.0.0/8|s',
      '198.18.0.0/15|s\nx',
    ])
      expect(isAllowKey(bad), JSON.stringify(bad)).toBe(false);
  });

  it('reads the refusals table as 2.6 and 3.x list it', () => {
    const answer = [
      '# table: kubebyon_refusals, type: string, size:102400, used:2',
      '0x55d0c1a0: key=kubebyon_slot_00001 use=0 exp=0 gpc0=3',
      '0x55d0c1b0: key=kubebyon_slot_00042 use=0 exp=0 shard=0 gpc0=17',
      '',
    ].join('\n');
    expect(parseShowTable(answer)).toEqual(
      new Map([
        ['kubebyon_slot_00001', 3],
        ['kubebyon_slot_00042', 17],
      ]),
    );
  });
});
