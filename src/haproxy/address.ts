import { isIP } from 'node:net';

/**
 * `<ipv4>:<port>`, `[<ipv6>]:<port>` or `*:<port>` as HAProxy's files write an endpoint, or null when the text
 * is none of them (a name, a port out of range, an address that is not an IP). Pure.
 */
export function parseAddress(text: string): { address: string; port: number } | null {
  const m = /^(?:\[([0-9A-Fa-f:.]+)\]|([0-9.]+|\*)):([0-9]{1,5})$/.exec(text);
  if (!m) return null;
  const a = m[1] ?? m[2] ?? '';
  const p = Number(m[3]);
  if (p < 1 || p > 65535 || (a !== '*' && isIP(a) === 0)) return null;
  return { address: a, port: p };
}
