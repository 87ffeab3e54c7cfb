import { isIP } from 'node:net';

/** One place a vCluster API server answers: a host node's address and the Service's NodePort. */
export interface Endpoint {
  address: string;
  port: number;
}

export type EndpointRejection = 'endpoint_address_invalid' | 'endpoint_port_invalid';

export type EndpointResult =
  | { ok: true; endpoint: Endpoint }
  | { ok: false; reason: EndpointRejection; detail: string };

/** Accepts an IPv4 or IPv6 address (no zone, no brackets) and any valid TCP port; IPv6 is canonicalised. */
export function validateEndpoint(address: string, port: number): EndpointResult {
  const family = isIP(address);
  if (family === 0) {
    return {
      ok: false,
      reason: 'endpoint_address_invalid',
      detail: `${JSON.stringify(address)} is not an IPv4 or IPv6 address`,
    };
  }
  if (!Number.isInteger(port) || port < 1 || port > 65535) {
    return {
      ok: false,
      reason: 'endpoint_port_invalid',
      detail: `port ${port} is not an integer from 1 to 65535`,
    };
  }
  return { ok: true, endpoint: { address: family === 6 ? canonicalIPv6(address) : address, port } };
}

// One spelling per address, so that "2001:DB8::1" and "2001:db8:0::1" never look like a change.
function canonicalIPv6(address: string): string {
  return new URL(`http://[${address}]/`).hostname.slice(1, -1);
}

export function endpointKey(e: Endpoint): string {
  return e.address.includes(':') ? `[${e.address}]:${e.port}` : `${e.address}:${e.port}`;
}

export function compareEndpoints(a: Endpoint, b: Endpoint): number {
  return a.address === b.address ? a.port - b.port : a.address < b.address ? -1 : 1;
}
