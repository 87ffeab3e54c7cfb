import { isIPv4, isIPv6 } from 'node:net';

/**
 * A cluster's authorized networks: who may reach its API server (EKS `publicAccessCidrs`, GKE "authorized
 * networks", AKS "authorized IP ranges"). Pure.
 *
 * Each entry is a CIDR, IPv4 or IPv6; a bare address is a /32 or /128. Entries are stored in one canonical
 * form, the text HAProxy itself prints for the network's address (glibc's `inet_ntop`: dotted IPv4, RFC 5952
 * IPv6), because HAProxy matches them as strings it builds from the source address (`src,ipmask(..)`, see
 * `src/haproxy/edge.ts`). An empty list means open to all.
 *
 * Refused, each with a reason: a malformed entry or prefix length; host bits set (`10.0.0.5/24`: refused,
 * not normalised, since either reading of it may be the mistake); IPv4 octets with leading zeros (read as
 * octal by some tools); IPv4-mapped (`::ffff:a.b.c.d`, write the IPv4 form) and IPv4-compatible (`::a.b.c.d`,
 * deprecated) IPv6; zone ids; duplicates once canonical; more than `MAX_AUTHORIZED_NETWORKS`.
 */

/**
 * The most entries a list may hold: above EKS (40 public CIDRs) and GKE (50 authorized networks), where an
 * office, a VPN and a CI egress fit many times over; each entry is one key in HAProxy's allow map, so the
 * bound keeps that map at most 64 × N entries.
 */
export const MAX_AUTHORIZED_NETWORKS = 64;

export type NetworkRejection =
  | 'network_invalid'
  | 'network_prefix_invalid'
  | 'network_host_bits_set'
  | 'network_ipv4_mapped'
  | 'network_duplicate'
  | 'too_many_networks';

export type NetworksResult =
  | { ok: true; networks: string[] }
  | { ok: false; reason: NetworkRejection; detail: string; index?: number };

/** A network as `{ family, bits, prefix }`: the address as a bigint (32 or 128 bits wide). */
export interface Network {
  family: 4 | 6;
  bits: bigint;
  prefix: number;
}

const IPV4 = /^(0|[1-9][0-9]{0,2})\.(0|[1-9][0-9]{0,2})\.(0|[1-9][0-9]{0,2})\.(0|[1-9][0-9]{0,2})$/;
const LEADING_ZERO_IPV4 = /^(?=(?:.*\.)?0[0-9])[0-9]{1,3}(?:\.[0-9]{1,3}){3}$/;

/**
 * A first, textual check of an entry (for the OpenAPI document and the CRD schema, RE2 and ECMAScript alike):
 * dotted IPv4 without leading zeros, or hex digits, colons and dots with at least one colon, each with an
 * optional prefix length in range. Everything `parseNetwork` takes matches it; not all that matches is taken.
 */
export const NETWORK_PATTERN =
  '^(?:(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])(?:[.](?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])){3}' +
  '(?:/(?:3[0-2]|[12]?[0-9]))?|[0-9A-Fa-f.]*:[0-9A-Fa-f:.]*(?:/(?:12[0-8]|1[01][0-9]|[1-9]?[0-9]))?)$';

/** The longest entry taken: an IPv6 CIDR with an embedded IPv4 is at most 49 characters. */
export const MAX_NETWORK_LENGTH = 64;

/** Checks a list as the webhook receives it; its canonical entries, sorted, or the first problem. */
export function validateNetworks(list: readonly string[]): NetworksResult {
  if (list.length > MAX_AUTHORIZED_NETWORKS)
    return {
      ok: false,
      reason: 'too_many_networks',
      detail: `at most ${MAX_AUTHORIZED_NETWORKS} authorized networks, got ${list.length}`,
    };
  const seen = new Map<string, number>();
  const parsedAll: Array<{ network: Network; text: string }> = [];
  for (const [index, entry] of list.entries()) {
    const parsed = parseNetwork(entry);
    if (!parsed.ok) return { ...parsed, index };
    const text = formatNetwork(parsed.network);
    const first = seen.get(text);
    if (first !== undefined)
      return {
        ok: false,
        reason: 'network_duplicate',
        detail: `${JSON.stringify(entry)} is ${text}, already given at index ${first}`,
        index,
      };
    seen.set(text, index);
    parsedAll.push({ network: parsed.network, text });
  }
  // Sorted on what was parsed: `compareNetworkText` parses both sides of every comparison (at 16 entries,
  // 8 times the parsing and most of a list change's garbage).
  parsedAll.sort((x, y) => compareNetworks(x.network, y.network));
  return { ok: true, networks: parsedAll.map((x) => x.text) };
}

/** One entry: a bare address or `address/prefix`. */
export function parseNetwork(
  entry: string,
): { ok: true; network: Network } | { ok: false; reason: NetworkRejection; detail: string } {
  // Typed as a string, but read from JSON and from Kubernetes objects: anything else is refused, not thrown on.
  const text = typeof entry === 'string' ? entry : String(JSON.stringify(entry));
  const bad = (reason: NetworkRejection, why: string) => ({
    ok: false as const,
    reason,
    detail: `${JSON.stringify(text.slice(0, 64))}: ${why}`,
  });
  if (typeof entry !== 'string' || entry.length === 0 || entry.length > MAX_NETWORK_LENGTH)
    return bad('network_invalid', 'not an IPv4 or IPv6 address or CIDR');
  const slash = entry.indexOf('/');
  const address = slash < 0 ? entry : entry.slice(0, slash);
  const prefixText = slash < 0 ? undefined : entry.slice(slash + 1);
  let family: 4 | 6;
  let bits: bigint;
  // Node's isIPv4 refuses `010.0.0.1` outright: said here so that the answer names the reason.
  if (LEADING_ZERO_IPV4.test(address))
    return bad('network_invalid', 'IPv4 octets are written without leading zeros');
  if (isIPv4(address)) {
    if (!IPV4.test(address)) return bad('network_invalid', 'IPv4 octets are written without leading zeros');
    family = 4;
    bits = address.split('.').reduce((n, o) => (n << 8n) | BigInt(o), 0n);
  } else if (isIPv6(address) && !address.includes('%')) {
    family = 6;
    bits = ipv6Bits(address);
    if (bits >> 32n === 0xffffn)
      return bad('network_ipv4_mapped', 'an IPv4-mapped address: write it as IPv4');
    if (bits >> 32n === 0n && bits > 0xffffn)
      return bad('network_ipv4_mapped', 'an IPv4-compatible address (deprecated): write it as IPv4');
  } else {
    return bad('network_invalid', 'not an IPv4 or IPv6 address or CIDR');
  }
  const width = family === 4 ? 32 : 128;
  let prefix = width;
  if (prefixText !== undefined) {
    if (!/^(0|[1-9][0-9]{0,2})$/.test(prefixText) || Number(prefixText) > width)
      return bad('network_prefix_invalid', `the prefix length must be 0 to ${width}`);
    prefix = Number(prefixText);
  }
  const host = (1n << BigInt(width - prefix)) - 1n;
  if ((bits & host) !== 0n) {
    const network = formatNetwork({ family, bits: bits & ~host, prefix });
    return bad('network_host_bits_set', `host bits are set (the network is ${network})`);
  }
  return { ok: true, network: { family, bits, prefix } };
}

function ipv6Bits(address: string): bigint {
  // The URL parser expands any IPv6 form (embedded IPv4 included) into eight hex groups once compressed.
  const host = new URL(`http://[${address}]/`).hostname.slice(1, -1);
  const [head = '', tail] = host.split('::');
  const left = head === '' ? [] : head.split(':');
  const right = tail === undefined || tail === '' ? [] : tail.split(':');
  const groups = [...left, ...Array(8 - left.length - right.length).fill('0'), ...right];
  return groups.reduce((n, g) => (n << 16n) | BigInt(Number.parseInt(g, 16)), 0n);
}

/** The network's text as HAProxy prints its address (glibc `inet_ntop`), with `/prefix`. */
export function formatNetwork(n: Network): string {
  return `${formatAddress(n.family, n.bits)}/${n.prefix}`;
}

export function formatAddress(family: 4 | 6, bits: bigint): string {
  if (family === 4) return [24n, 16n, 8n, 0n].map((s) => String((bits >> s) & 0xffn)).join('.');
  const words = [...Array(8).keys()].map((i) => Number((bits >> BigInt(112 - 16 * i)) & 0xffffn));
  // glibc: the longest run of two or more zero words (the first of equals) becomes `::`; an address whose
  // first five words are zero and sixth 0xffff, or first six zero (not `::` or `::1`), ends in dotted IPv4.
  let best = { base: -1, len: 0 };
  for (let i = 0; i < 8; ) {
    if (words[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && words[j] === 0) j++;
    if (j - i > best.len) best = { base: i, len: j - i };
    i = j;
  }
  if (best.len < 2) best = { base: -1, len: 0 };
  const dotted =
    best.base === 0 && (best.len === 6 || (best.len === 5 && words[5] === 0xffff))
      ? formatAddress(4, bits & 0xffffffffn)
      : undefined;
  const parts: string[] = [];
  for (let i = 0; i < 8; i++) {
    if (i === best.base) {
      parts.push(i === 0 ? ':' : '');
      i += best.len - 1;
      if (i === 7) parts.push('');
      continue;
    }
    if (dotted !== undefined && i === 6) {
      parts.push(dotted);
      break;
    }
    parts.push((words[i] as number).toString(16));
  }
  return parts.join(':');
}

/** Whether two canonical lists are the same, absent reading as empty (open to all). */
export function sameNetworks(a: readonly string[] | undefined, b: readonly string[] | undefined): boolean {
  const x = a ?? [];
  const y = b ?? [];
  return x.length === y.length && x.every((n, i) => n === y[i]);
}

/** IPv4 first, then by address, then by prefix: a stable order for what is stored and shown. */
export function compareNetworkText(a: string, b: string): number {
  const x = parseNetwork(a);
  const y = parseNetwork(b);
  if (!x.ok || !y.ok) return a < b ? -1 : a > b ? 1 : 0;
  return compareNetworks(x.network, y.network);
}

/** `compareNetworkText`'s order, of parsed networks. */
export function compareNetworks(p: Network, q: Network): number {
  if (p.family !== q.family) return p.family - q.family;
  if (p.bits !== q.bits) return p.bits < q.bits ? -1 : 1;
  return p.prefix - q.prefix;
}
