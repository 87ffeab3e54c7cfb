import { isIP } from 'node:net';

/** Why a `control_plane_host` cannot be routed by SNI. Stable strings: they appear in API answers and metrics. */
export type HostRejection =
  | 'host_empty'
  | 'host_is_ip_literal'
  | 'host_invalid_characters'
  | 'host_too_long'
  | 'host_label_too_long'
  | 'host_label_invalid'
  | 'host_single_label';

export type HostResult = { ok: true; host: string } | { ok: false; reason: HostRejection; detail: string };

const MAX_HOST_LENGTH = 253;
const MAX_LABEL_LENGTH = 63;
// Only these characters ever reach haproxy.cfg from a host; everything else is refused before rendering.
// Checked on the raw input: lower-casing first would turn KELVIN SIGN (U+212A) into an ASCII k.
const ALLOWED = /^[A-Za-z0-9.-]+$/;
const LABEL = /^[a-z0-9](?:[a-z0-9-]*[a-z0-9])?$/;
// A last label the URL standard reads as an IPv4 number makes the whole host an IPv4 address: decimal,
// leading-0 octal, or 0x hex, where 0x alone is 0. (All-digit labels such as 08 count: the URL parser then
// fails rather than treating the host as a name.)
const IPV4_NUMBER = /^(?:[0-9]+|0x[0-9a-f]*)$/;

/**
 * Validates and normalises a control-plane host for SNI routing: a DNS name of at least two labels,
 * lower-cased (SNI matching is case-insensitive), one trailing dot dropped (SNI never carries it).
 * IP literals are refused: TLS clients send no SNI for an IP, so such a cluster could never be matched.
 */
export function validateHost(raw: string): HostResult {
  if (raw.length === 0) return { ok: false, reason: 'host_empty', detail: 'host is empty' };
  const unbracketed = raw.startsWith('[') && raw.endsWith(']') ? raw.slice(1, -1) : raw;
  if (isIP(unbracketed) !== 0 || isIP(unbracketed.split('%')[0] ?? '') === 6) {
    return {
      ok: false,
      reason: 'host_is_ip_literal',
      detail: `${JSON.stringify(raw)} is an IP address; SNI routing needs a DNS name (clients send no SNI for IPs)`,
    };
  }
  if (raw.length > MAX_HOST_LENGTH + 1) {
    return {
      ok: false,
      reason: 'host_too_long',
      detail: `host is longer than ${MAX_HOST_LENGTH} characters`,
    };
  }
  if (!ALLOWED.test(raw)) {
    return {
      ok: false,
      reason: 'host_invalid_characters',
      detail:
        'host may hold only letters, digits, hyphens and dots (internationalised names must use their xn-- form)',
    };
  }
  const lower = raw.toLowerCase();
  const host = lower.endsWith('.') ? lower.slice(0, -1) : lower;
  if (host.length > MAX_HOST_LENGTH) {
    return {
      ok: false,
      reason: 'host_too_long',
      detail: `host is longer than ${MAX_HOST_LENGTH} characters`,
    };
  }
  const labels = host.split('.');
  // Before the label rules: 2130706433 or 127.0x are addresses, not badly formed names.
  if (IPV4_NUMBER.test(labels[labels.length - 1] ?? '')) {
    return {
      ok: false,
      reason: 'host_is_ip_literal',
      detail: `${JSON.stringify(raw)} reads as an IP address; SNI routing needs a DNS name`,
    };
  }
  for (const label of labels) {
    if (label.length > MAX_LABEL_LENGTH) {
      return {
        ok: false,
        reason: 'host_label_too_long',
        detail: `label ${JSON.stringify(label.slice(0, 20))}… is longer than ${MAX_LABEL_LENGTH} characters`,
      };
    }
    if (!LABEL.test(label)) {
      return {
        ok: false,
        reason: 'host_label_invalid',
        detail: `label ${JSON.stringify(label)} must be 1-${MAX_LABEL_LENGTH} letters, digits or hyphens, not starting or ending with a hyphen`,
      };
    }
  }
  if (labels.length < 2) {
    return {
      ok: false,
      reason: 'host_single_label',
      detail: 'host must have at least two labels (name.domain)',
    };
  }
  return { ok: true, host };
}
