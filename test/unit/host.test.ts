import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { validateHost } from '../../src/routes/host.js';
import { PROPERTY_TIMEOUT_MS } from '../support/property.js';

describe('validateHost', () => {
  it.each([
    ['api.demo.example.com', 'api.demo.example.com'],
    ['API.Demo.Example.COM', 'api.demo.example.com'],
    ['api.demo.example.com.', 'api.demo.example.com'],
    ['demo.206-189-80-126.sslip.io', 'demo.206-189-80-126.sslip.io'],
    ['xn--bcher-kva.example', 'xn--bcher-kva.example'],
    ['a-b.c1', 'a-b.c1'],
  ])('accepts %s as %s', (raw, host) => {
    expect(validateHost(raw)).toEqual({ ok: true, host });
  });

  it.each([
    '10.0.0.1',
    '206.189.80.126',
    '::1',
    '[::1]',
    '2001:db8::1',
    '[2001:db8::1]',
    'fe80::1%eth0',
    '127.1',
    '0x7f.1',
    '10.0.0.1.',
    // The URL standard reads these as IPv4 too: 0x with no digits is 0, and one number is a whole address.
    '127.0x',
    '10.0.0.0x',
    '0x.0x',
    '1.0x',
    '127.0.0.0x',
    '0X7F.1',
    '2130706433',
    '0x7f000001',
    '017700000001',
    '0x',
  ])('rejects the IP literal %s with host_is_ip_literal', (raw) => {
    const result = validateHost(raw);
    expect(result).toMatchObject({ ok: false, reason: 'host_is_ip_literal' });
  });

  it.each([
    ['api.example.com\nbackend evil', 'host_invalid_characters'],
    ['api.example.com }', 'host_invalid_characters'],
    ['api.example.com if { always_true }', 'host_invalid_characters'],
    ['"api.example.com"', 'host_invalid_characters'],
    ["api'.example.com", 'host_invalid_characters'],
    ['api.example.com#comment', 'host_invalid_characters'],
    ['api example.com', 'host_invalid_characters'],
    ['bücher.example', 'host_invalid_characters'],
    ['*.example.com', 'host_invalid_characters'],
    ['api_x.example.com', 'host_invalid_characters'],
    ['api.example.com\r', 'host_invalid_characters'],
    // KELVIN SIGN lower-cases to an ASCII k: the characters are checked before lower-casing.
    ['\u212Aube.example.com', 'host_invalid_characters'],
    ['api.\u212A8s.io', 'host_invalid_characters'],
    ['', 'host_empty'],
    ['localhost', 'host_single_label'],
    ['abc123', 'host_single_label'],
    ['-api.example.com', 'host_label_invalid'],
    ['api-.example.com', 'host_label_invalid'],
    ['api..example.com', 'host_label_invalid'],
    ['.example.com', 'host_label_invalid'],
    [`${'a'.repeat(64)}.example.com`, 'host_label_too_long'],
    [`${'a.'.repeat(127)}com`, 'host_too_long'],
  ])('rejects %j with %s', (raw, reason) => {
    expect(validateHost(raw)).toMatchObject({ ok: false, reason });
  });

  it('accepts a 63-character label and a 253-character name', () => {
    expect(validateHost(`${'a'.repeat(63)}.example.com`).ok).toBe(true);
    const long = `${'a'.repeat(63)}.${'b'.repeat(63)}.${'c'.repeat(63)}.${'d'.repeat(58)}.io`;
    expect(long).toHaveLength(253);
    expect(validateHost(long).ok).toBe(true);
    expect(validateHost(`${long}.`).ok).toBe(true);
    expect(validateHost(`x${long}`)).toMatchObject({ ok: false, reason: 'host_too_long' });
  });

  it('never lets through a character HAProxy could read as syntax', { timeout: PROPERTY_TIMEOUT_MS }, () => {
    fc.assert(
      fc.property(fc.string({ unit: 'binary', maxLength: 80 }), (raw) => {
        const result = validateHost(raw);
        if (result.ok) expect(result.host).toMatch(/^[a-z0-9-]+(\.[a-z0-9-]+)+$/);
      }),
      { numRuns: 2000 },
    );
  });

  it('accepts only hosts whose raw input is ASCII', { timeout: PROPERTY_TIMEOUT_MS }, () => {
    const unit = fc.oneof(
      fc.constantFrom('a', 'K', 'k', 's', 'i', '0', '1', '.', '-', '\u212A', '\u017F', '\u0130', '\u00DF'),
      fc.string({ unit: 'binary', minLength: 1, maxLength: 1 }),
    );
    fc.assert(
      fc.property(fc.string({ unit, minLength: 1, maxLength: 30 }), (raw) => {
        if (validateHost(raw).ok) expect(raw).toMatch(/^[\x21-\x7e]+$/);
      }),
      { numRuns: 5000 },
    );
  });

  it('refuses as an IP literal every host the URL standard parses to an IPv4 address', () => {
    const hex = fc.string({ unit: fc.constantFrom(...'0123456789abcdefABCDEF'), maxLength: 8 });
    const number = fc.oneof(
      fc.nat().map(String),
      fc.nat({ max: 0xffffffff }).map(String),
      hex.map((h) => `0x${h}`),
      hex.map((h) => `0X${h}`),
      fc.string({ unit: fc.constantFrom(...'01234567'), maxLength: 11 }).map((o) => `0${o}`),
    );
    const label = fc.oneof(
      { arbitrary: number, weight: 4 },
      { arbitrary: fc.constantFrom('a', 'x1', 'example'), weight: 1 },
    );
    const host = fc
      .tuple(fc.array(label, { minLength: 1, maxLength: 5 }), fc.boolean())
      .map(([labels, dot]) => `${labels.join('.')}${dot ? '.' : ''}`);
    fc.assert(
      fc.property(host, (raw) => {
        let hostname: string | undefined;
        try {
          hostname = new URL(`http://${raw}`).hostname;
        } catch {
          hostname = undefined;
        }
        const result = validateHost(raw);
        if (hostname !== undefined && /^\d+\.\d+\.\d+\.\d+$/.test(hostname)) {
          expect(result, raw).toMatchObject({ ok: false, reason: 'host_is_ip_literal' });
        }
        if (result.ok) expect(hostname, raw).not.toMatch(/^\d+\.\d+\.\d+\.\d+$/);
      }),
      { numRuns: 5000 },
    );
  });
});
