import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { RawBackend, RawFrontend } from '../../src/haproxy/model.js';
import { slotAllowMapName } from '../../src/haproxy/slot-allow.js';
import {
  backendLines,
  frontendLines,
  lineTagsFor,
  readConfigText,
  sectionKey,
  spliceSections,
} from '../../src/providers/dataplaneapi/config-text.js';
import { storageName } from '../../src/providers/dataplaneapi/map-names.js';
import { FOREIGN_TEXT } from '../support/fake-dataplaneapi-provider.js';
import { ownerTags } from '../support/owner.js';
import { PROPERTY_TIMEOUT_MS } from '../support/property.js';

const MAP_FILE = '/etc/haproxy/maps/kubebyon-haproxy-adapter_sni.map';
const mapName = (file: string) => (file === MAP_FILE ? 'kubebyon-haproxy-adapter.sni.map' : file);
const ALLOW = 'kubebyon-haproxy-adapter.allow.map';
/** The storage keeps a slot's own allow map beside the SNI map, under its stored name. */
const GUARDS = { allowMap: ALLOW, path: (name: string) => `/etc/haproxy/maps/${storageName(name)}` };
const METADATA = lineTagsFor({ ownership: 'metadata', serverTags: true });
const DESCRIPTION = lineTagsFor({ ownership: 'description', serverTags: true });
const DESCRIPTION_NO_SERVER_TAGS = lineTagsFor({ ownership: 'description', serverTags: false });

const frontend: RawFrontend = {
  name: 'kubebyon_sni',
  bind: { address: '127.0.0.1', port: 17443 },
  inspectDelayMs: 5000,
  acceptsTlsHello: true,
  defaultBackend: 'console',
  rules: [],
  sniMap: 'kubebyon-haproxy-adapter.sni.map',
  tags: ownerTags(),
};
const slot = (n: number, servers: RawBackend['servers'] = []): RawBackend => ({
  name: `kubebyon_slot_0000${n}`,
  balance: 'leastconn',
  servers,
  tags: ownerTags(),
});
const server = (name: string, address: string, port: number, check = true) => ({
  name,
  address,
  port,
  check,
  tags: ownerTags(),
});

describe("the Data Plane API's configuration as text", () => {
  for (const [form, lines] of [
    ['metadata', METADATA],
    ['description', DESCRIPTION],
  ] as const)
    it(`reads back our sections as written, tags in the ${form} form`, () => {
      const b = slot(1, [server('srv1', '10.0.0.1', 30443), server('srv2', 'fd00::1', 30443, false)]);
      // A slot guarding itself by its own map, in the storage beside the SNI map.
      const guarded = { ...slot(2), allowMap: slotAllowMapName(ALLOW, 'kubebyon_slot_00002') };
      const text = [
        frontendLines(frontend, { sniMap: MAP_FILE }, lines).join('\n'),
        backendLines(b, lines).join('\n'),
        backendLines(guarded, lines, GUARDS).join('\n'),
      ].join('\n\n');
      expect(text).toContain(
        'acl kb_allowed src,map_ip(/etc/haproxy/maps/kubebyon-haproxy-adapter_allow_kubebyon_slot_00002.map) -m str 1',
      );
      const state = readConfigText(text, mapName, ALLOW);
      expect(state.frontends).toEqual([frontend]);
      expect(state.backends).toEqual([b, guarded]);
      // Another owner's allow map, or a guard with a line missing, is no guard of ours.
      expect(readConfigText(text, mapName, 'other.allow.map').backends[1]?.allowMap).toBeUndefined();
      const cut = text.replace(/\n\s*tcp-request content reject unless kb_allowed[^\n]*/, '');
      expect(readConfigText(cut, mapName, ALLOW).backends[1]?.allowMap).toBeUndefined();
    });

  it('without server tags (v3.1), a server is written untagged and read back untagged (its backend owns it)', () => {
    const b = slot(1, [server('srv1', '10.0.0.1', 30443)]);
    const state = readConfigText(backendLines(b, DESCRIPTION_NO_SERVER_TAGS).join('\n'), mapName, ALLOW);
    expect(state.backends[0]?.servers[0]?.tags).toEqual({});
    expect(state.backends[0]?.tags).toEqual(ownerTags());
  });

  it('reads the forms the API writes when another tool writes the file through its objects', () => {
    const text = `frontend kubebyon_sni # {"owner":{"value":"kubebyon-haproxy-adapter"}}
  mode tcp
  bind 127.0.0.1:17443 name kubebyon accept-proxy # {"owner":{"value":"kubebyon-haproxy-adapter"}}
  bind 127.0.0.2:17443 name theirs
  tcp-request inspect-delay 5s
  tcp-request content accept if { req_ssl_hello_type 1 }
  use_backend console if { req.ssl_sni -i console.example.com }
  use_backend %[req.ssl_sni,lower,map(${MAP_FILE})]
  default_backend console
`;
    const [f] = readConfigText(text, mapName, ALLOW).frontends;
    expect(f).toMatchObject({
      bind: { address: '127.0.0.1', port: 17443 },
      inspectDelayMs: 5000,
      acceptsTlsHello: true,
      sniMap: 'kubebyon-haproxy-adapter.sni.map',
      defaultBackend: 'console',
      rules: [{ backend: 'console', host: 'console.example.com', tags: {} }],
    });
    const untagged = readConfigText('frontend f\n  tcp-request inspect-delay 1500\n', mapName, ALLOW)
      .frontends[0];
    expect(untagged).toMatchObject({ inspectDelayMs: 1500, tags: {}, bind: null });
  });

  it('gives a rule in a frontend tagged by its description the tags of the backend it routes to', () => {
    const text = `frontend kubebyon_sni
  description kubebyon owner=kubebyon-haproxy-adapter
  use_backend b1 if { req.ssl_sni -i a.example.com }
  use_backend console if { req.ssl_sni -i c.example.com }

backend b1
  description kubebyon owner=kubebyon-haproxy-adapter cluster=a
`;
    const [f] = readConfigText(text, mapName, ALLOW).frontends;
    expect(f?.rules.map((r) => r.tags)).toEqual([{ owner: 'kubebyon-haproxy-adapter', cluster: 'a' }, {}]);
  });

  it('refuses to write a value that could inject configuration', () => {
    expect(() => frontendLines({ ...frontend, name: 'a b' }, { sniMap: MAP_FILE }, METADATA)).toThrow();
    expect(() => frontendLines(frontend, { sniMap: '/etc/x y.map' }, METADATA)).toThrow();
    expect(() => backendLines(slot(1, [server('srv1', '10.0.0.1\n', 1)]), METADATA)).toThrow();
    expect(() => backendLines({ ...slot(1), tags: { owner: 'a b' } }, METADATA)).toThrow();
  });
});

describe('putting our sections in the file', () => {
  const ours = (n: number, port = 30000 + n) =>
    backendLines(slot(n, [server('srv1', '10.0.0.1', port)]), METADATA);

  it('replaces, removes and appends sections, sends every other line back byte for byte, and drops the API head', () => {
    const text = `# _md5hash=abc\n# _version=7\n${FOREIGN_TEXT}\n${ours(1).join('\n')}\n\n${ours(2).join('\n')}\n`;
    const edits = new Map<string, readonly string[] | null>([
      [sectionKey('backend', 'kubebyon_slot_00001'), ours(1, 31001)],
      [sectionKey('backend', 'kubebyon_slot_00002'), null],
      [sectionKey('backend', 'kubebyon_slot_00003'), ours(3)],
    ]);
    const out = spliceSections(text, edits);
    expect(out.startsWith(FOREIGN_TEXT)).toBe(true);
    expect(out).not.toMatch(/_version|_md5hash/);
    const backends = readConfigText(out, mapName, ALLOW).backends.map((b) => [b.name, b.servers[0]?.port]);
    expect(backends).toEqual([
      ['console', 8443],
      ['kubebyon_slot_00001', 31001],
      ['kubebyon_slot_00003', 30003],
    ]);
    // Nothing to change: the same text.
    expect(spliceSections(out, new Map([[sectionKey('backend', 'kubebyon_slot_00003'), ours(3)]]))).toBe(out);
  });

  it('for any sections and edits: ours as edited, in place; the rest byte for byte', {
    timeout: PROPERTY_TIMEOUT_MS,
  }, () => {
    const foreignSection = fc
      .tuple(fc.constantFrom('backend', 'frontend', 'listen', 'userlist'), fc.integer({ min: 0, max: 9 }))
      .map(([kind, n]) => `${kind} other${n}\n  # a comment\n  mode tcp\n`);
    fc.assert(
      fc.property(
        fc.array(fc.oneof(foreignSection, fc.integer({ min: 1, max: 6 })), { maxLength: 8 }),
        fc.array(fc.tuple(fc.integer({ min: 1, max: 8 }), fc.option(fc.integer({ min: 1, max: 65535 }))), {
          maxLength: 6,
        }),
        (layout, edits) => {
          const present = new Set<number>();
          const parts = layout.map((p) => {
            if (typeof p === 'string') return p;
            present.add(p);
            return `${ours(p).join('\n')}\n`;
          });
          const text = parts.join('\n');
          const want = new Map<string, readonly string[] | null>();
          for (const [n, port] of edits)
            want.set(sectionKey('backend', `kubebyon_slot_0000${n}`), port === null ? null : ours(n, port));
          const out = spliceSections(text, want);
          const foreignOf = (t: string) =>
            t
              .split(/\n(?=[^\s#])/)
              .filter((s) => s.trim() !== '' && !s.startsWith('backend kubebyon_slot_'))
              .map((s) => s.trimEnd());
          expect(foreignOf(out)).toEqual(foreignOf(text));
          const read = new Map(
            readConfigText(out, mapName, ALLOW)
              .backends.filter((b) => b.name.startsWith('kubebyon'))
              .map((b) => [b.name, b.servers[0]?.port]),
          );
          for (let n = 1; n <= 8; n++) {
            const key = sectionKey('backend', `kubebyon_slot_0000${n}`);
            const name = `kubebyon_slot_0000${n}`;
            if (want.has(key)) {
              const edit = want.get(key);
              expect(read.get(name)).toBe(
                edit
                  ? readConfigText(edit.join('\n'), mapName, ALLOW).backends[0]?.servers[0]?.port
                  : undefined,
              );
            } else expect(read.has(name)).toBe(present.has(n));
          }
          expect(spliceSections(out, want)).toBe(out);
        },
      ),
      { numRuns: 300 },
    );
  });
});
