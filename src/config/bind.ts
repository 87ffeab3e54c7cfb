import { isIP } from 'node:net';
import type { Bind } from '../haproxy/model.js';

/**
 * Parses KUBEBYON_HAPROXY_BIND_ADDR as the platform's runbook writes it: `:443` (every address),
 * `0.0.0.0:443`, `127.0.0.1:8443`, `[::]:443`. `*` stands for every address.
 */
export function parseBindAddr(raw: string): { ok: true; bind: Bind } | { ok: false; detail: string } {
  const match = /^(?:\[([0-9A-Fa-f:.]+)\]|([0-9.]*|\*)):([0-9]{1,5})$/.exec(raw.trim());
  const port = Number(match?.[3]);
  if (!match || port < 1 || port > 65535) {
    return {
      ok: false,
      detail: `${JSON.stringify(raw)} is not [address]:port (e.g. ":443", "0.0.0.0:443", "[::]:443")`,
    };
  }
  const v6 = match[1];
  const v4 = match[2];
  if (v6 !== undefined) {
    return isIP(v6) === 6
      ? { ok: true, bind: { address: v6, port } }
      : { ok: false, detail: `${v6} is not an IPv6 address` };
  }
  if (v4 === '' || v4 === '*') return { ok: true, bind: { address: '*', port } };
  return isIP(v4 ?? '') === 4
    ? { ok: true, bind: { address: v4 ?? '', port } }
    : { ok: false, detail: `${JSON.stringify(v4)} is not an IPv4 address` };
}
