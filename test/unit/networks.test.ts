import { spawnSync } from 'node:child_process';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  compareNetworkText,
  formatAddress,
  formatNetwork,
  MAX_AUTHORIZED_NETWORKS,
  type NetworkRejection,
  parseNetwork,
  validateNetworks,
} from '../../src/routes/networks.js';
import { PROPERTY_TIMEOUT_MS } from '../support/property.js';

const REASONS: readonly NetworkRejection[] = [
  'network_invalid',
  'network_prefix_invalid',
  'network_host_bits_set',
  'network_ipv4_mapped',
  'network_duplicate',
  'too_many_networks',
];

/** The canonical text of one entry, or the reason it is refused. */
function canonical(entry: string): string {
  const parsed = parseNetwork(entry);
  return parsed.ok ? formatNetwork(parsed.network) : `!${parsed.reason}`;
}

/**
 * glibc's own inet_ntop/inet_pton (Python's socket module calls them), the reference for the text HAProxy
 * prints: one process for a whole batch. Each line in: 32 hex digits (ntop) or an address (pton).
 */
function glibc(mode: 'ntop' | 'pton', lines: readonly string[]): string[] {
  const script = [
    'import socket, sys',
    'for line in sys.stdin.read().split("\\n")[:-1]:',
    mode === 'ntop'
      ? '    print(socket.inet_ntop(socket.AF_INET6, bytes.fromhex(line)))'
      : [
          '    try: print(socket.inet_pton(socket.AF_INET6, line).hex())',
          '    except OSError: print("-")',
        ].join('\n'),
  ].join('\n');
  const run = spawnSync('python3', ['-c', script], { input: `${lines.join('\n')}\n`, encoding: 'utf8' });
  if (run.error || run.status !== 0)
    throw new Error(`python3 (the glibc reference) failed: ${run.error?.message ?? run.stderr}`);
  return run.stdout.split('\n').slice(0, -1);
}

const hex128 = (bits: bigint) => bits.toString(16).padStart(32, '0');

// IPv6 addresses as their eight words, zero words common so that every run length and position shows up.
const word = fc.oneof(
  { weight: 6, arbitrary: fc.constant(0) },
  { weight: 1, arbitrary: fc.constant(0xffff) },
  { weight: 1, arbitrary: fc.constant(1) },
  { weight: 3, arbitrary: fc.integer({ min: 0, max: 0xffff }) },
);
const v6Words = fc.array(word, { minLength: 8, maxLength: 8 });
const bitsOf = (words: readonly number[]) => words.reduce((n, w) => (n << 16n) | BigInt(w), 0n);

/** Other ways to write the same address: every group in full, upper case, a zero run other than the longest. */
function v6Spellings(words: readonly number[], pick: number): string[] {
  const full = words.map((w) => w.toString(16).padStart(4, '0')).join(':');
  const spellings = [full, full.toUpperCase(), words.map((w) => w.toString(16)).join(':')];
  const zeroRuns: Array<[number, number]> = [];
  for (let i = 0; i < 8; i++) {
    if (words[i] !== 0) continue;
    let j = i;
    while (j < 8 && words[j] === 0) j++;
    zeroRuns.push([i, j]);
    i = j;
  }
  const run = zeroRuns[pick % Math.max(1, zeroRuns.length)];
  if (run) {
    const [from, to] = run;
    const head = words.slice(0, from).map((w) => w.toString(16).toUpperCase());
    const tail = words.slice(to).map((w) => w.toString(16));
    spellings.push(`${head.join(':')}::${tail.join(':')}`);
  }
  return spellings;
}

describe('parseNetwork and formatNetwork: the canonical form', () => {
  it.each([
    ['10.0.0.1', '10.0.0.1/32'],
    ['10.0.0.1/32', '10.0.0.1/32'],
    ['10.0.0.0/8', '10.0.0.0/8'],
    ['0.0.0.0/0', '0.0.0.0/0'],
    ['0.0.0.0', '0.0.0.0/32'],
    ['255.255.255.255', '255.255.255.255/32'],
    ['198.51.1.128/25', '198.51.1.128/25'],
    ['100.64.0.0/10', '100.64.0.0/10'],
    ['::', '::/128'],
    ['::/0', '::/0'],
    ['::1', '::1/128'],
    ['::2', '::2/128'],
    ['::ffff', '::ffff/128'],
    ['1::', '1::/128'],
    ['1::1', '1::1/128'],
    ['2001:DB8:0:0:0:0:0:0/32', '2001:db8::/32'],
    ['2001:0db8:0000:0000:0000:0000:0000:0001', '2001:db8::1/128'],
    ['2001:db8::/32', '2001:db8::/32'],
    ['2001:DB8::/32', '2001:db8::/32'],
    // RFC 5952: the longest run of zero words, the first of equal runs; a single zero word stays.
    ['1:0:0:1:0:0:0:0', '1:0:0:1::/128'],
    ['1:0:0:0:1:0:0:0', '1::1:0:0:0/128'],
    ['1:0:0:1:1:0:0:1', '1::1:1:0:0:1/128'],
    ['1:0:1:1:1:1:1:1', '1:0:1:1:1:1:1:1/128'],
    ['1:1:1:1:1:1:1:0', '1:1:1:1:1:1:1:0/128'],
    ['0:1:1:1:1:1:1:1', '0:1:1:1:1:1:1:1/128'],
    ['0:0:1:1:1:1:1:1', '::1:1:1:1:1:1/128'],
    ['1:1:1:1:1:1:0:0', '1:1:1:1:1:1::/128'],
    ['fe80::/10', 'fe80::/10'],
    ['FE80:0000::/64', 'fe80::/64'],
    ['2001:db8:0:1::/64', '2001:db8:0:1::/64'],
    ['2001:db8::1:0:0:1', '2001:db8::1:0:0:1/128'],
    ['fd00::/8', 'fd00::/8'],
    ['ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff', 'ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff/128'],
    // Six zero words then one that is not: IPv4-compatible (glibc would write it dotted), refused.
    ['0:0:0:0:0:0:ffff:1', '!network_ipv4_mapped'],
    ['0:0:0:0:0:1::/96', '::1:0:0/96'],
  ])('%s is %s', (entry, expected) => {
    expect(canonical(entry)).toBe(expected);
  });

  it('prints what glibc inet_ntop prints for the embedded-IPv4 shapes it recognises', () => {
    // Not accepted as entries (mapped and compatible addresses are refused), but formatAddress is the text
    // HAProxy prints for a source address: it must agree even there.
    const cases = [
      0xffff_0102_0304n, // ::ffff:1.2.3.4
      0x0102_0304n, // ::1.2.3.4
      0x1_0000n, // ::0.1.0.0
      0x1_0002n, // ::0.1.0.2
      2n, // ::2 (seven zero words: not dotted)
      0xffffn, // ::ffff
      0xffff_0000_0000n, // ::ffff:0.0.0.0
      0x1_ffff_0102_0304n, // ::1:ffff:102:304: not mapped
    ];
    const ours = cases.map((b) => formatAddress(6, b));
    expect(ours).toEqual(glibc('ntop', cases.map(hex128)));
    expect(ours).toEqual([
      '::ffff:1.2.3.4',
      '::1.2.3.4',
      '::0.1.0.0',
      '::0.1.0.2',
      '::2',
      '::ffff',
      '::ffff:0.0.0.0',
      '::1:ffff:102:304',
    ]);
  });
});

describe('parseNetwork: what is refused, and why', () => {
  it.each([
    // Not an address at all.
    ['', 'network_invalid'],
    [' ', 'network_invalid'],
    ['10.0.0.1 ', 'network_invalid'],
    [' 10.0.0.1', 'network_invalid'],
    ['example.com', 'network_invalid'],
    ['10.0.0', 'network_invalid'],
    ['10.0.0.1.', 'network_invalid'],
    ['10.0.0.256', 'network_invalid'],
    ['10.0.0.-1', 'network_invalid'],
    ['127.1', 'network_invalid'],
    ['2130706433', 'network_invalid'],
    ['0x7f.0.0.1', 'network_invalid'],
    ['0x7f000001', 'network_invalid'],
    ['[::1]', 'network_invalid'],
    ['[::1]/128', 'network_invalid'],
    ['1:2:3:4:5:6:7:8:9', 'network_invalid'],
    ['1::2::3', 'network_invalid'],
    ['12345::', 'network_invalid'],
    ['g::', 'network_invalid'],
    [':::', 'network_invalid'],
    ['/8', 'network_invalid'],
    ['any', 'network_invalid'],
    ['*', 'network_invalid'],
    ['10.0.0.0/8\n', 'network_prefix_invalid'],
    ['10.0.0.1\nbackend x', 'network_invalid'],
    // Leading zeros: 010 is 8 to inet_aton and 10 to others, so it is refused, not guessed.
    ['010.0.0.1', 'network_invalid'],
    ['10.0.0.01', 'network_invalid'],
    ['00.0.0.0/0', 'network_invalid'],
    ['::ffff:010.0.0.1', 'network_invalid'],
    // Zone ids name an interface of one machine: meaningless in a list for HAProxy.
    ['fe80::1%eth0', 'network_invalid'],
    ['fe80::1%1', 'network_invalid'],
    ['fe80::%eth0/64', 'network_invalid'],
    // Prefixes.
    ['10.0.0.0/', 'network_prefix_invalid'],
    ['10.0.0.0/33', 'network_prefix_invalid'],
    ['1.2.3.4/33', 'network_prefix_invalid'],
    ['10.0.0.0/-1', 'network_prefix_invalid'],
    ['10.0.0.0/+8', 'network_prefix_invalid'],
    ['10.0.0.0/08', 'network_prefix_invalid'],
    ['10.0.0.0/01', 'network_prefix_invalid'],
    ['0.0.0.0/00', 'network_prefix_invalid'],
    ['10.0.0.0/8.0', 'network_prefix_invalid'],
    ['10.0.0.0/ 8', 'network_prefix_invalid'],
    ['10.0.0.0/8/8', 'network_prefix_invalid'],
    ['10.0.0.0/255.0.0.0', 'network_prefix_invalid'],
    ['10.0.0.0/0x8', 'network_prefix_invalid'],
    ['::/129', 'network_prefix_invalid'],
    ['::/1000', 'network_prefix_invalid'],
    ['2001:db8::/032', 'network_prefix_invalid'],
    // Host bits: refused, not normalised.
    ['10.0.0.5/24', 'network_host_bits_set'],
    ['10.0.0.1/0', 'network_host_bits_set'],
    ['198.51.1.1/31', 'network_host_bits_set'],
    ['2001:db8::1/64', 'network_host_bits_set'],
    ['2001:db9::/31', 'network_host_bits_set'],
    ['::1/127', 'network_host_bits_set'],
    // IPv4 in IPv6 clothing: write the IPv4 form.
    ['::ffff:1.2.3.4', 'network_ipv4_mapped'],
    ['::FFFF:1.2.3.4', 'network_ipv4_mapped'],
    ['::ffff:102:304', 'network_ipv4_mapped'],
    ['0:0:0:0:0:ffff:0102:0304/128', 'network_ipv4_mapped'],
    ['::ffff:0:0/96', 'network_ipv4_mapped'],
    ['::ffff:10.0.0.0/104', 'network_ipv4_mapped'],
    ['::1.2.3.4', 'network_ipv4_mapped'],
    ['::1:2', 'network_ipv4_mapped'],
    // Too long to be any address (and never echoed in full).
    [`${'1'.repeat(100)}`, 'network_invalid'],
    [`::${'0'.repeat(70)}1`, 'network_invalid'],
  ])('%j: %s', (entry, reason) => {
    const parsed = parseNetwork(entry);
    expect(parsed).toMatchObject({ ok: false, reason });
    if (!parsed.ok) expect(parsed.detail.length).toBeLessThan(200);
  });

  it('names the network a host-bits entry meant, without taking it', () => {
    expect(parseNetwork('10.0.0.5/24')).toEqual({
      ok: false,
      reason: 'network_host_bits_set',
      detail: '"10.0.0.5/24": host bits are set (the network is 10.0.0.0/24)',
    });
    expect(parseNetwork('2001:DB8::1/32')).toMatchObject({
      reason: 'network_host_bits_set',
      detail: expect.stringContaining('(the network is 2001:db8::/32)'),
    });
  });

  it('says why a leading zero is refused', () => {
    expect(parseNetwork('010.0.0.1')).toMatchObject({ detail: expect.stringMatching(/leading zeros/) });
  });

  it('refuses, and does not throw on, what JSON or a Kubernetes object may hold instead of a string', () => {
    for (const value of [5, null, undefined, true, {}, ['10.0.0.1'], 10.5]) {
      expect(parseNetwork(value as unknown as string)).toMatchObject({
        ok: false,
        reason: 'network_invalid',
      });
      expect(validateNetworks([value as unknown as string])).toMatchObject({
        ok: false,
        reason: 'network_invalid',
        index: 0,
      });
    }
  });
});

describe('validateNetworks', () => {
  it('gives the canonical entries, IPv4 first, then by address, then by prefix', () => {
    expect(
      validateNetworks([
        '2001:DB8::/32',
        '10.0.0.0/16',
        '198.51.1.7',
        '10.0.0.0/8',
        '::1',
        '9.255.255.255',
        '::/0',
        '0.0.0.0/0',
      ]),
    ).toEqual({
      ok: true,
      networks: [
        '0.0.0.0/0',
        '9.255.255.255/32',
        '10.0.0.0/8',
        '10.0.0.0/16',
        '198.51.1.7/32',
        '::/0',
        '::1/128',
        '2001:db8::/32',
      ],
    });
  });

  it('takes an empty list (open to all), and overlapping networks', () => {
    expect(validateNetworks([])).toEqual({ ok: true, networks: [] });
    expect(validateNetworks(['10.0.0.0/8', '10.1.0.0/16', '10.1.2.3'])).toEqual({
      ok: true,
      networks: ['10.0.0.0/8', '10.1.0.0/16', '10.1.2.3/32'],
    });
  });

  it.each([
    [['10.0.0.1', '10.0.0.1/32'], 1],
    [['10.0.0.1/32', '10.0.0.1'], 1],
    [['10.0.0.0/8', '10.0.0.0/8'], 1],
    [['2001:db8::/32', '2001:DB8:0:0:0:0:0:0/32'], 1],
    [['::1', '0:0:0:0:0:0:0:1/128'], 1],
    [['1.1.1.1', '10.0.0.0/8', '2001:db8::1', '2001:0db8::0001'], 3],
  ])('refuses the duplicate in %j (index %i) once both are canonical', (list, index) => {
    const result = validateNetworks(list);
    expect(result).toMatchObject({ ok: false, reason: 'network_duplicate', index });
    if (!result.ok) expect(result.detail).toMatch(/already given at index \d+$/);
  });

  it('names the index of the first bad entry', () => {
    expect(validateNetworks(['10.0.0.0/8', '::1', 'nope', '10.0.0.5/24'])).toMatchObject({
      ok: false,
      reason: 'network_invalid',
      index: 2,
    });
    expect(validateNetworks(['10.0.0.0/8', '10.0.0.5/24'])).toMatchObject({
      reason: 'network_host_bits_set',
      index: 1,
    });
  });

  it(`takes ${MAX_AUTHORIZED_NETWORKS} entries and refuses ${MAX_AUTHORIZED_NETWORKS + 1}`, () => {
    const list = (n: number) => Array.from({ length: n }, (_, i) => `10.0.${i}.0/24`);
    expect(MAX_AUTHORIZED_NETWORKS).toBe(64);
    const full = validateNetworks(list(64));
    expect(full.ok && full.networks.length).toBe(64);
    expect(validateNetworks(list(65))).toEqual({
      ok: false,
      reason: 'too_many_networks',
      detail: 'at most 64 authorized networks, got 65',
    });
    // Counted before anything is parsed: 65 bad entries are too many, not invalid.
    expect(validateNetworks(Array(65).fill('x'))).toMatchObject({ reason: 'too_many_networks' });
  });
});

describe('properties', () => {
  const v4 = fc
    .tuple(fc.integer({ min: 0, max: 2 ** 32 - 1 }), fc.integer({ min: 0, max: 32 }))
    .map(([n, prefix]) => {
      const bits = BigInt(n) & ~((1n << BigInt(32 - prefix)) - 1n);
      return { family: 4 as const, bits, prefix };
    });
  const v6 = fc.tuple(v6Words, fc.integer({ min: 0, max: 128 })).map(([words, prefix]) => {
    const bits = bitsOf(words) & ~((1n << BigInt(128 - prefix)) - 1n);
    return { family: 6 as const, bits, prefix };
  });
  // Mapped and compatible IPv6 (refused) left out.
  const network = fc.oneof(v4, v6).filter((n) => parseNetwork(formatNetwork(n)).ok);

  it(
    'formatNetwork(parse(x)) is a fixed point, for every spelling of every network',
    () => {
      fc.assert(
        fc.property(v6Words, fc.integer({ min: 0, max: 128 }), fc.nat(), fc.boolean(), (w, p, pick, bare) => {
          const bits = bitsOf(w) & ~((1n << BigInt(128 - p)) - 1n);
          const words = [...Array(8).keys()].map((i) => Number((bits >> BigInt(112 - 16 * i)) & 0xffffn));
          const texts = v6Spellings(words, pick).map((t) => (bare && p === 128 ? t : `${t}/${p}`));
          const results = texts.map(canonical);
          // Every spelling reads as the same network, or all are refused for the same reason.
          expect(new Set(results).size).toBe(1);
          const [result = ''] = results;
          if (result.startsWith('!')) {
            expect(result).toBe('!network_ipv4_mapped');
            return;
          }
          expect(canonical(result)).toBe(result);
          const parsed = parseNetwork(result);
          expect(parsed.ok && parsed.network).toEqual({ family: 6, bits, prefix: p });
        }),
        { numRuns: 3000, seed: 20261204 },
      );
      fc.assert(
        fc.property(v4, ({ bits, prefix }) => {
          const text = formatNetwork({ family: 4, bits, prefix });
          expect(canonical(text)).toBe(text);
          expect(text).toMatch(/^(0|[1-9]\d{0,2})(\.(0|[1-9]\d{0,2})){3}\/(0|[1-9]\d?)$/);
        }),
        { numRuns: 2000, seed: 20261204 },
      );
    },
    PROPERTY_TIMEOUT_MS,
  );

  it(
    'formatAddress matches glibc inet_ntop, and parsing matches glibc inet_pton, for random IPv6 addresses',
    () => {
      const addresses = fc.sample(v6Words.map(bitsOf), { numRuns: 5000, seed: 20261204 });
      // Every run length at every position, besides the random ones.
      for (let from = 0; from < 8; from++)
        for (let to = from; to <= 8; to++)
          addresses.push(bitsOf([...Array(8).keys()].map((i) => (i >= from && i < to ? 0 : 0xab))));
      const ours = addresses.map((b) => formatAddress(6, b));
      const theirs = glibc('ntop', addresses.map(hex128));
      const differ = ours.flatMap((o, i) =>
        o === theirs[i] ? [] : [`${hex128(addresses[i] ?? 0n)}: ${o} vs ${theirs[i]}`],
      );
      expect(differ).toEqual([]);
      // And back: glibc reads our text as the same address; so does parseNetwork, where it takes it.
      expect(glibc('pton', ours)).toEqual(addresses.map(hex128));
      for (const [i, text] of ours.entries()) {
        const parsed = parseNetwork(text);
        if (parsed.ok) expect(parsed.network.bits).toBe(addresses[i]);
        else expect(parsed.reason).toBe('network_ipv4_mapped');
      }
    },
    PROPERTY_TIMEOUT_MS,
  );

  it(
    'never throws, and refuses only with a known reason, on any string',
    () => {
      const noise = fc.oneof(
        fc.string({ maxLength: 70 }),
        fc.string({ unit: 'binary', maxLength: 70 }),
        fc.stringMatching(/^[0-9a-fA-F:./%]{0,50}$/),
        fc.tuple(fc.ipV6(), fc.integer({ min: -2, max: 140 })).map(([a, p]) => `${a}/${p}`),
        fc.tuple(fc.ipV4Extended(), fc.integer({ min: -2, max: 40 })).map(([a, p]) => `${a}/${p}`),
        fc.ipV6(),
        fc.ipV4Extended(),
      );
      fc.assert(
        fc.property(noise, (entry) => {
          const parsed = parseNetwork(entry);
          if (!parsed.ok) {
            expect(REASONS).toContain(parsed.reason);
            return;
          }
          // Whatever is taken is canonical after one round, and holds only address characters.
          const text = formatNetwork(parsed.network);
          expect(canonical(text)).toBe(text);
          expect(text).toMatch(/^[0-9a-f:.]+\/\d{1,3}$/);
        }),
        { numRuns: 5000, seed: 20261204 },
      );
    },
    PROPERTY_TIMEOUT_MS,
  );

  it(
    'gives the same list whatever the order and spelling of its entries',
    () => {
      fc.assert(
        fc.property(
          fc.uniqueArray(network, { maxLength: 20, selector: (n) => formatNetwork(n) }),
          fc.nat(),
          (networks, seed) => {
            const texts = networks.map((n) => formatNetwork(n));
            const expected = validateNetworks(texts);
            expect(expected.ok).toBe(true);
            const shuffled = [...texts].sort(
              (a, b) => ((a.length * 7 + seed) % 5) - ((b.length * 7 + seed) % 5) || (a < b ? 1 : -1),
            );
            const upper = shuffled.map((t) => t.toUpperCase());
            expect(validateNetworks(upper)).toEqual(expected);
            // Sorted, by the stored order.
            if (expected.ok)
              expect([...expected.networks].sort(compareNetworkText)).toEqual(expected.networks);
          },
        ),
        { numRuns: 1000, seed: 20261204 },
      );
    },
    PROPERTY_TIMEOUT_MS,
  );
});
