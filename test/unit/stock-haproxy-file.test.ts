import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { RawBackend, RawState } from '../../src/haproxy/model.js';
import {
  DEFAULTS_NAME,
  defaultsNameFor,
  generationOf,
  renderOwnedFile,
  UnsafeValueError,
} from '../../src/providers/haproxy/owned-file.js';
import { OwnedFileParseError, parseOwnedFile } from '../../src/providers/haproxy/owned-file-parse.js';
import { Registry } from '../../src/registry/registry.js';
import { ownFrontend as frontend, ownerTags } from '../support/owner.js';
import { PROPERTY_TIMEOUT_MS } from '../support/property.js';

const backend = (over: Partial<RawBackend> = {}): RawBackend => ({
  name: 'kubebyon_a_0123456789ab',
  balance: 'leastconn',
  servers: [
    { name: 'srv1', address: '127.0.0.1', port: 30001, check: true, tags: ownerTags() },
    { name: 'srv2', address: '::1', port: 30002, check: false, tags: ownerTags() },
  ],
  tags: ownerTags('a'),
  ...over,
});
const state = (f = frontend(), b = [backend()]): RawState => ({ frontends: [f], backends: b });

const sorted = (s: RawState): RawState => ({
  frontends: [...s.frontends].sort((a, b) => (a.name < b.name ? -1 : 1)),
  backends: [...s.backends]
    .map((b) => ({ ...b, servers: [...b.servers].sort((x, y) => (x.name < y.name ? -1 : 1)) }))
    .sort((a, b) => (a.name < b.name ? -1 : 1)),
});

const nameArb = fc.stringMatching(/^[a-z][a-z0-9_]{0,20}$/);
const tagsArb = fc.oneof(
  fc.constant({}),
  fc.constant(ownerTags()),
  fc.stringMatching(/^[A-Za-z0-9][A-Za-z0-9._-]{0,30}$/).map((c) => ownerTags(c)),
);
const serverArb = fc.record({
  name: fc.integer({ min: 1, max: 50 }).map((n) => `srv${n}`),
  address: fc.oneof(fc.ipV4(), fc.constantFrom('::1', '2001:db8::1', 'fe80::1')),
  port: fc.integer({ min: 1, max: 65535 }),
  check: fc.boolean(),
  tags: tagsArb,
});
const backendArb = fc.record({
  name: nameArb.map((n) => `be_${n}`),
  balance: fc.constantFrom('leastconn', 'roundrobin', 'source'),
  servers: fc.uniqueArray(serverArb, { selector: (s) => s.name, maxLength: 4 }),
  tags: tagsArb,
});
const frontendArb = fc.record({
  name: nameArb.map((n) => `fe_${n}`),
  bind: fc.record({
    address: fc.oneof(fc.constant('*'), fc.ipV4(), fc.constant('::')),
    port: fc.integer({ min: 1, max: 65535 }),
  }),
  inspectDelayMs: fc.option(fc.integer({ min: 0, max: 60_000 }), { nil: null }),
  acceptsTlsHello: fc.boolean(),
  defaultBackend: fc.option(nameArb, { nil: null }),
  rules: fc.array(
    fc.record({
      backend: nameArb,
      host: fc.domain().filter((h) => /^[a-z0-9.-]+$/.test(h)),
      tags: fc.constantFrom({}, ownerTags()),
    }),
    { maxLength: 4 },
  ),
  tags: tagsArb,
});
const stateArb = fc.record({
  frontends: fc.uniqueArray(frontendArb, { selector: (f) => f.name, maxLength: 2 }),
  backends: fc.uniqueArray(backendArb, { selector: (b) => b.name, maxLength: 4 }),
});

describe('owned file', () => {
  it('reads back exactly what it wrote, tags included', { timeout: PROPERTY_TIMEOUT_MS }, () => {
    fc.assert(
      fc.property(stateArb, (s) => {
        const text = renderOwnedFile(s);
        const parsed = parseOwnedFile(text);
        expect(sorted(parsed.state)).toEqual(sorted(s));
        expect(parsed.generation).toBe(s.frontends.length > 0 ? generationOf(s) : null);
      }),
      { numRuns: 300 },
    );
  });

  it('renders the SNI frontend and backends in HAProxy syntax, isolated by a named defaults section', () => {
    const text = renderOwnedFile(state(frontend({ defaultBackend: 'console' })));
    expect(text).toContain(`defaults ${DEFAULTS_NAME}\n  mode tcp\n`);
    expect(text).toContain('timeout tunnel 4h');
    expect(text).toMatch(
      new RegExp(
        [
          `frontend kubebyon_sni from ${DEFAULTS_NAME} # kubebyon owner=kubebyon-haproxy-adapter`,
          '  id [0-9]{10}',
          '  mode tcp',
          '  bind \\*:443',
          '  tcp-request inspect-delay 5000ms',
          '  tcp-request content accept if \\{ req.ssl_hello_type 1 \\}',
          '  use_backend kubebyon_a_0123456789ab if \\{ req.ssl_sni -i a.example.com \\} # kubebyon owner=kubebyon-haproxy-adapter',
          '  default_backend console',
        ].join('\n'),
      ),
    );
    expect(text).toContain(
      [
        `backend kubebyon_a_0123456789ab from ${DEFAULTS_NAME} # kubebyon owner=kubebyon-haproxy-adapter cluster=a`,
        '  mode tcp',
        '  balance leastconn',
        '  server srv1 127.0.0.1:30001 check # kubebyon owner=kubebyon-haproxy-adapter',
        '  server srv2 [::1]:30002 # kubebyon owner=kubebyon-haproxy-adapter',
      ].join('\n'),
    );
  });

  it('writes no section at all when it owns nothing (HAProxy still loads the file)', () => {
    const text = renderOwnedFile({ frontends: [], backends: [] });
    expect(text.split('\n').every((l) => l === '' || l.startsWith('#'))).toBe(true);
    expect(parseOwnedFile(text)).toEqual({ state: { frontends: [], backends: [] }, generation: null });
  });

  it('refuses to write any value outside the allowed charsets', () => {
    const bad: RawState[] = [
      state(frontend({ rules: [{ backend: 'b', host: 'a.example.com }\n  use_backend x', tags: {} }] })),
      state(frontend({ rules: [{ backend: 'b c', host: 'a.example.com', tags: {} }] })),
      state(frontend({ rules: [{ backend: 'b', host: 'a.example.com#', tags: {} }] })),
      state(frontend({ name: 'fe\nbackend x' })),
      state(frontend({ defaultBackend: 'x y' })),
      state(frontend({ bind: { address: '127.0.0.1 ssl crt /x', port: 443 } })),
      state(frontend({ bind: { address: '*', port: 70000 } })),
      state(frontend({ tags: { owner: 'me\nbackend x' } })),
      state(frontend({ tags: { 'own er': 'me' } })),
      state(frontend(), [backend({ balance: 'leastconn\n  server x 1.2.3.4:1' })]),
      state(frontend(), [backend({ tags: ownerTags('a b') })]),
      state(frontend(), [
        backend({ servers: [{ name: 'srv1', address: 'example.com', port: 1, check: true, tags: {} }] }),
      ]),
      state(frontend(), [
        backend({ servers: [{ name: 'srv1', address: '127.0.0.1', port: 0, check: true, tags: {} }] }),
      ]),
      state(frontend(), [backend(), backend()]),
    ];
    for (const s of bad) expect(() => renderOwnedFile(s), JSON.stringify(s)).toThrow(UnsafeValueError);
  });

  it('refuses to read a file with lines it did not write, naming the line', () => {
    const text = renderOwnedFile(state());
    const edited = text.replace('  balance leastconn', '  balance leastconn\n  option httpchk');
    expect(() => parseOwnedFile(edited)).toThrow(OwnedFileParseError);
    expect(() => parseOwnedFile(edited)).toThrow(/line [0-9]+: unexpected backend directive/);
    expect(() => parseOwnedFile('global\n  daemon\n')).toThrow(OwnedFileParseError);
    expect(() => parseOwnedFile('backend x\n')).toThrow(OwnedFileParseError);
  });

  it('changes its generation with the structure, not with the servers', () => {
    const g = generationOf(state());
    expect(generationOf(state(frontend(), [backend({ servers: [] })]))).toBe(g);
    expect(generationOf(state(frontend({ rules: [] })))).not.toBe(g);
    expect(generationOf(state(frontend({ bind: { address: '*', port: 444 } })))).not.toBe(g);
    expect(generationOf(state(frontend(), [backend({ balance: 'roundrobin' })]))).not.toBe(g);
    // Back and forth between two structures that differ in one backend only (the last one is remembered).
    for (let i = 0; i < 2; i++) {
      expect(generationOf(state())).toBe(g);
      expect(generationOf(state(frontend(), [backend({ balance: 'roundrobin' })]))).not.toBe(g);
    }
    expect(g).toBeGreaterThanOrEqual(1_000_000_000);
    expect(g).toBeLessThan(2_000_000_000);
  });
});

describe('one owned file per owner', () => {
  it('names its defaults after the owner id, keeping the old name for the default owner', () => {
    const staging = new Registry('staging');
    expect(defaultsNameFor(new Registry().id)).toBe(DEFAULTS_NAME);
    expect(defaultsNameFor(staging.id)).toBe('kubebyon_adapter.staging');
    const text = renderOwnedFile(state(), defaultsNameFor(staging.id));
    expect(text).toMatch(/^defaults kubebyon_adapter\.staging$/m);
    expect(text).toMatch(/^frontend kubebyon_sni from kubebyon_adapter\.staging /m);
    expect(parseOwnedFile(text, defaultsNameFor(staging.id)).state.frontends).toHaveLength(1);
    // Another owner's file is not this owner's to read, let alone rewrite.
    expect(() => parseOwnedFile(text, DEFAULTS_NAME)).toThrow(OwnedFileParseError);
  });
});
