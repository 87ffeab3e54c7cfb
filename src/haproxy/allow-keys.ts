import { formatAddress, parseNetwork } from '../routes/networks.js';

/**
 * The allow map's keys (authorized networks, `edge.ts`): what a slot's list becomes in the map the SNI
 * frontend looks sources up in, and the check every key passes before it reaches a file or a command. Pure.
 */

/** The allow-map keys that let `networks` reach `slot`: its flag and one key per network. */
export function allowKeys(slot: string, networks: readonly string[], dualStack: boolean): string[] {
  if (networks.length === 0) return [];
  const keys = new Set([slot]);
  for (const text of networks) {
    keys.add(`${text}|${slot}`);
    const parsed = parseNetwork(text);
    if (!parsed.ok) continue;
    const n = parsed.network;
    // An IPv6 socket that also takes IPv4 sees an IPv4 client as ::ffff:a.b.c.d: the same network, mapped.
    if (dualStack && n.family === 4)
      keys.add(`${formatAddress(6, (0xffffn << 32n) | n.bits)}/${96 + n.prefix}|${slot}`);
    // A source in ::/96 is looked up by its exact address alone (`kb_v6compat`): ::1 gets a key of its own
    // when a wider IPv6 network holds it.
    const host = BigInt(128 - n.prefix);
    if (n.family === 6 && n.prefix < 128 && n.bits >> host === LOOPBACK6 >> host) keys.add(`::1/128|${slot}`);
  }
  return [...keys];
}

/** The slot a key belongs to: a flag is its slot's name, a network's key ends `|<slot>`. */
export function slotOfKey(key: string): string {
  const bar = key.lastIndexOf('|');
  return bar < 0 ? key : key.slice(bar + 1);
}

/** ::1, the IPv6 loopback. */
const LOOPBACK6 = 1n;

const NAME = /^[A-Za-z0-9_.:-]{1,127}$/;
const V4_NET = /^(?:(?:0|[1-9][0-9]{0,2})\.){3}(?:0|[1-9][0-9]{0,2})\/(?:0|[1-9][0-9]?)$/;
const V6_NET = /^[0-9a-f:.]{2,45}\/(?:0|[1-9][0-9]{0,2})$/;

/**
 * Whether `key` is one `allowKeys` writes: a slot's name (its flag), or `<network>|<slot>` with the network
 * in canonical text (IPv4, IPv6, or IPv4 as mapped IPv6). Checked before a key reaches a file or a command.
 */
export function isAllowKey(key: string): boolean {
  const bar = key.indexOf('|');
  if (bar < 0) return NAME.test(key);
  return NAME.test(key.slice(bar + 1)) && isCanonicalNetwork(key.slice(0, bar));
}

/**
 * Whether `net` is a network in canonical text. IPv4, nearly every key, is judged by its digits alone (0.6 µs;
 * through `parseNetwork` and back it was 3.7 µs, and a memo of every key checked held up to a million keys:
 * 13 MB at N = 5000 × 16, most of them copies). IPv6 and mapped IPv4 go through `parseNetwork` and back.
 */
function isCanonicalNetwork(net: string): boolean {
  if (V4_NET.test(net)) return isCanonicalV4(net);
  if (!V6_NET.test(net)) return false;
  const parsed = parseNetwork(net);
  if (parsed.ok)
    return `${formatAddress(parsed.network.family, parsed.network.bits)}/${parsed.network.prefix}` === net;
  // The mapped twin of an IPv4 network (`::ffff:a.b.c.d/96+L`), which the webhook itself refuses.
  const m = /^::ffff:((?:[0-9]{1,3}\.){3}[0-9]{1,3})\/([0-9]{1,3})$/.exec(net);
  const v4 = m ? parseNetwork(`${m[1]}/${Number(m[2]) - 96}`) : undefined;
  return v4?.ok === true && v4.network.family === 4 && `::ffff:${m?.[1]}/${m?.[2]}` === net;
}

/** `V4_NET` text (no leading zeros) whose octets are bytes, whose prefix is at most 32, with no host bits. */
function isCanonicalV4(net: string): boolean {
  const slash = net.indexOf('/');
  const prefix = Number(net.slice(slash + 1));
  if (prefix > 32) return false;
  let bits = 0;
  for (const octet of net.slice(0, slash).split('.')) {
    const n = Number(octet);
    if (n > 255) return false;
    bits = bits * 256 + n;
  }
  // The host part's value: what the address holds below its prefix (2 ** 32 fits a double exactly).
  return bits % 2 ** (32 - prefix) === 0;
}

/** Whether `network` is one a slot's own map holds (`slot-allow.ts`): a network as an allow key names it. */
export function isAllowNetwork(network: string): boolean {
  return !network.includes('|') && isCanonicalNetwork(network);
}

/** The value of every allow-map key. */
export const ALLOW_VALUE = '1';
