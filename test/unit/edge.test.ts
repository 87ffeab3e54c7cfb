import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { allowKeys, isAllowKey, isAllowNetwork } from '../../src/haproxy/allow-keys.js';
import {
  type Edge,
  edgeLines,
  isEdgeLine,
  isSlotGuardLine,
  parseShowTable,
  readEdge,
  readSlotGuard,
  slotGuardLines,
} from '../../src/haproxy/edge.js';
import { formatAddress, parseNetwork } from '../../src/routes/networks.js';
import { PROPERTY_TIMEOUT_MS } from '../support/property.js';

const FILES = { sniMap: '/etc/haproxy/o.sni.map' };
const ALLOW = 'o.allow.map';

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
        const read = readEdge(lines, ALLOW);
        expect(read).toEqual({ inspectDelayMs: delay, acceptsTlsHello: true, edge });
        // The frontend looks no source up: each slot backend guards itself.
        expect(lines.filter((l) => /allow|map_ip/.test(l))).toEqual([]);
        for (const l of lines) expect(isEdgeLine(l), l).toBe(true);
        // The lines do not name the allow map: the reader's is the edge's.
        expect(readEdge(lines, 'p.allow.map').edge).toEqual({ ...edge, allowMap: 'p.allow.map' });
        // A line gone (a hand edit, a partial write): not this guard, so the next plan writes it again.
        const cut = [...lines.slice(0, pick % lines.length), ...lines.slice((pick % lines.length) + 1)];
        expect(readEdge(cut, ALLOW).edge).not.toEqual(edge);
        // A line too many of the guard's kinds: no guard either.
        expect(readEdge([...lines, 'tcp-request content reject'], ALLOW).edge).toBeNull();
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
    expect(readEdge(rewritten, ALLOW).edge).toEqual(edge);
    // What every release before the guard wrote.
    expect(
      readEdge(
        ['tcp-request inspect-delay 5000ms', 'tcp-request content accept if { req.ssl_hello_type 1 }'],
        ALLOW,
      ),
    ).toEqual({ inspectDelayMs: 5000, acceptsTlsHello: true, edge: null });
    // What the release before wrote: the frontend looked sources up in one allow map. No guard: rewritten.
    const lines = edgeLines(edge, 5000, FILES);
    const at = lines.indexOf('tcp-request inspect-delay 5000ms');
    const lookups = [
      'acl kb_restricted var(txn.kb_slot),map(/etc/haproxy/o.allow.map) -m found',
      'acl kb_allowed src,ipmask(32,128),concat(/128|,txn.kb_slot),map(/etc/haproxy/o.allow.map) -m found',
    ];
    expect(readEdge([...lines.slice(0, at), ...lookups, ...lines.slice(at)], ALLOW).edge).toBeNull();
    expect(
      readEdge([...lines, 'tcp-request content reject if kb_restricted !kb_allowed'], ALLOW).edge,
    ).toBeNull();
  });

  it("reads back a slot backend's guard, and none from lines missing, changed or one too many", () => {
    const files = fc.constantFrom(
      '/etc/haproxy/maps/o.allow.kb_slot_00001.map',
      '/usr/local/etc/haproxy/maps/kubebyon.allow.kb_slot_04711.map',
    );
    const others = fc.subarray(['balance roundrobin', 'server s1 10.0.0.1:6443 check', 'mode tcp'], {
      minLength: 0,
    });
    fc.assert(
      fc.property(files, others, fc.nat(), (file, rest, pick) => {
        const lines = slotGuardLines(file);
        expect(lines).toHaveLength(3);
        expect(lines[0]).toBe(`acl kb_allowed src,map_ip(${file}) -m str 1`);
        expect(readSlotGuard(lines)).toBe(file);
        // Among the backend's other lines, in any order.
        expect(readSlotGuard([...rest, ...lines].reverse())).toBe(file);
        for (const l of lines) expect(isSlotGuardLine(l), l).toBe(true);
        for (const l of rest) expect(isSlotGuardLine(l), l).toBe(false);
        const i = pick % lines.length;
        // A line gone.
        expect(readSlotGuard([...rest, ...lines.slice(0, i), ...lines.slice(i + 1)])).toBeUndefined();
        // A line twice.
        expect(readSlotGuard([...rest, ...lines, lines[i] as string])).toBeUndefined();
      }),
      { numRuns: 100 },
    );
    const file = '/etc/haproxy/maps/o.allow.kb_slot_00001.map';
    const lines = slotGuardLines(file);
    expect(readSlotGuard([])).toBeUndefined();
    expect(readSlotGuard([...lines, 'tcp-request content reject unless kb_allowed'])).toBeUndefined();
    // A line changed: another value, another match, another counter, another rule, or one more rule.
    for (const [from, to] of [
      ['-m str 1', '-m found'],
      ['-m str 1', '-m str 0'],
      ['map_ip(', 'map('],
      ['sc-inc-gpc0(1)', 'sc-inc-gpc0(0)'],
      ['reject unless', 'accept unless'],
    ] as const)
      for (const at of [0, 1, 2]) {
        const changed = lines.map((l, j) => (j === at ? l.replace(from, to) : l));
        if (changed[at] !== lines[at]) expect(readSlotGuard(changed), changed[at]).toBeUndefined();
      }
    expect(readSlotGuard([...lines, 'tcp-request content accept'])).toBeUndefined();
    expect(readSlotGuard([...lines, 'acl other src 10.0.0.0/8'])).toBeUndefined();
    // What the guard's readers collect: its lines, of any file; none of the backend's other lines.
    for (const l of [
      'acl kb_allowed src,map_ip(/x.map) -m found',
      'tcp-request content sc-inc-gpc0(1) unless other',
      'tcp-request content reject unless other',
    ])
      expect(isSlotGuardLine(l), l).toBe(true);
    for (const l of [
      'acl other src 10.0.0.0/8',
      'tcp-request content accept',
      'tcp-request content reject',
      'tcp-request content reject if kb_allowed',
      'tcp-request content sc-inc-gpc0(0) unless kb_allowed',
      'tcp-request connection reject unless kb_allowed',
      'balance roundrobin',
      'server s1 10.0.0.1:6443 check',
      ' acl kb_allowed src,map_ip(/x.map) -m str 1',
    ])
      expect(isSlotGuardLine(l), l).toBe(false);
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

  it(
    'judges an IPv4 network by its digits as parsing it and writing it back would',
    () => {
      // The reference: canonical when parsing and writing back gives the very text (the check before the digits).
      const canonical = (net: string) => {
        const p = parseNetwork(net);
        return (
          p.ok && p.network.family === 4 && `${formatAddress(4, p.network.bits)}/${p.network.prefix}` === net
        );
      };
      const octet = fc.oneof(
        fc.integer({ min: 0, max: 300 }).map(String),
        fc.constantFrom('00', '01', '007', ''),
      );
      const net = fc
        .tuple(fc.array(octet, { minLength: 4, maxLength: 4 }), fc.integer({ min: 0, max: 40 }), fc.boolean())
        .map(([o, prefix, aligned]) => {
          if (!aligned) return `${o.join('.')}/${prefix}`;
          // Host bits cleared where the octets are bytes: most draws are then canonical, not only refusals.
          const bytes = o.map((x) => Math.min(255, Number(x) || 0));
          const value = bytes.reduce((a, b) => a * 256 + b, 0);
          const bits = value - (value % 2 ** (32 - Math.min(prefix, 32)));
          return `${[24, 16, 8, 0].map((s) => Math.floor(bits / 2 ** s) % 256).join('.')}/${prefix}`;
        });
      let accepted = 0;
      fc.assert(
        fc.property(net, (n) => {
          const want = canonical(n);
          if (want) accepted++;
          expect(isAllowKey(`${n}|kubebyon_slot_00001`), n).toBe(want);
          expect(isAllowNetwork(n), n).toBe(want);
        }),
        { numRuns: 3000 },
      );
      // Both verdicts were drawn often.
      expect(accepted).toBeGreaterThan(300);
      expect(accepted).toBeLessThan(2700);
    },
    PROPERTY_TIMEOUT_MS,
  );

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
