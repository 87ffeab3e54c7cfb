import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { RawState } from '../../src/haproxy/model.js';
import {
  mapRuntime,
  parseMapFile,
  parseShowMap,
  renderMapFile,
  showMapCommand,
} from '../../src/providers/haproxy/map-file.js';
import {
  DEFAULTS_NAME,
  generationOf,
  renderOwnedFile,
  UnsafeValueError,
} from '../../src/providers/haproxy/owned-file.js';
import { OwnedFileParseError, parseOwnedFile } from '../../src/providers/haproxy/owned-file-parse.js';
import { RuntimeAnswerError } from '../../src/providers/haproxy/runtime-text.js';
import { ownerTags, ownFrontend } from '../support/owner.js';
import { PROPERTY_TIMEOUT_MS } from '../support/property.js';

const DIR = '/etc/haproxy/kubebyon';
const MAP = 'kubebyon-haproxy-adapter.sni.map';
const slot = (n: number, servers: RawState['backends'][number]['servers'] = []) => ({
  name: `kubebyon_slot_${String(n).padStart(5, '0')}`,
  balance: 'leastconn',
  servers,
  tags: ownerTags(),
});
const mapState = (over: Partial<RawState['frontends'][number]> = {}): RawState => ({
  frontends: [ownFrontend({ rules: [], sniMap: MAP, ...over })],
  backends: [slot(1), slot(2)],
});

describe('owned file with map routing', () => {
  it('routes by the map after the rules, with the map file in the owned file folder, and reads it back', () => {
    const s = mapState({ defaultBackend: 'console' });
    const text = renderOwnedFile(s, DEFAULTS_NAME, DIR);
    expect(text).toContain(
      `  use_backend %[req.ssl_sni,lower,map(${DIR}/${MAP})]\n  default_backend console\n`,
    );
    expect(parseOwnedFile(text, DEFAULTS_NAME, DIR).state).toEqual(s);
  });

  it('changes the generation with the map, not with the servers of a slot', () => {
    const s = mapState();
    const withServer: RawState = {
      ...s,
      backends: [
        slot(1, [{ name: 'srv1', address: '10.0.0.1', port: 6443, check: false, tags: ownerTags() }]),
        slot(2),
      ],
    };
    const rules = { ...s, frontends: [ownFrontend({ rules: [] })] };
    expect(generationOf(withServer)).toBe(generationOf(s));
    expect(generationOf(rules)).not.toBe(generationOf(s));
    // Files written before map routing keep the generation they had.
    expect(generationOf(rules)).toBe(
      generationOf({ ...rules, frontends: [ownFrontend({ rules: [], sniMap: null })] }),
    );
  });

  it('refuses unsafe map names and folders, and map paths outside its folder when reading', () => {
    for (const sniMap of ['../x.map', 'a b', 'x)]\n  use_backend y', '.hidden', ''])
      expect(
        () => renderOwnedFile(mapState({ sniMap: sniMap || 'a;b' }), DEFAULTS_NAME, DIR),
        sniMap,
      ).toThrow(UnsafeValueError);
    for (const dir of ['relative/dir', '/a b', '/x)]', undefined])
      expect(() => renderOwnedFile(mapState(), DEFAULTS_NAME, dir), String(dir)).toThrow(UnsafeValueError);
    const text = renderOwnedFile(mapState(), DEFAULTS_NAME, DIR);
    expect(() => parseOwnedFile(text, DEFAULTS_NAME, '/elsewhere')).toThrow(OwnedFileParseError);
    expect(() => parseOwnedFile(text, DEFAULTS_NAME)).toThrow(OwnedFileParseError);
    const twice = text.replace(/( {2}use_backend %\[.*\n)/, '$1$1');
    expect(() => parseOwnedFile(twice, DEFAULTS_NAME, DIR)).toThrow(/one per frontend/);
  });
});

describe('map file', () => {
  const hostArb = fc.domain().filter((h) => /^[a-z0-9.-]+$/.test(h));
  const valueArb = fc
    .integer({ min: 1, max: 99999 })
    .map((n) => `kubebyon_slot_${String(n).padStart(5, '0')}`);

  it('is a header and one sorted line per host, read back exactly', { timeout: PROPERTY_TIMEOUT_MS }, () => {
    fc.assert(
      fc.property(fc.dictionary(hostArb, valueArb, { maxKeys: 20 }), (d) => {
        const entries = new Map(Object.entries(d));
        const text = renderMapFile(entries);
        expect(text.startsWith('#')).toBe(true);
        const lines = text.split('\n').filter((l) => l && !l.startsWith('#'));
        expect(lines).toEqual([...entries.keys()].sort().map((h) => `${h} ${entries.get(h)}`));
        expect(parseMapFile(text)).toEqual(entries);
        // The same entries in any order: the same bytes.
        expect(renderMapFile(new Map([...entries].reverse()))).toBe(text);
      }),
    );
  });

  it('refuses keys and values HAProxy must never see', () => {
    const bad: Array<[string, string]> = [
      ['API.example.com', 'kubebyon_slot_00001'],
      ['a.example.com b', 'kubebyon_slot_00001'],
      ['a.example.com\nevil', 'kubebyon_slot_00001'],
      ['a.example.com', 'slot 1'],
      ['a.example.com', 'x\ny'],
      ['', 'kubebyon_slot_00001'],
    ];
    for (const [k, v] of bad) {
      expect(() => renderMapFile(new Map([[k, v]])), k).toThrow(UnsafeValueError);
      expect(() => mapRuntime.add('/m', k, v), k).toThrow(UnsafeValueError);
    }
    expect(() => mapRuntime.del('/m', 'a;@1 shutdown sessions')).toThrow(UnsafeValueError);
    expect(() => parseMapFile('a.example.com slot_1 extra\n')).toThrow(RuntimeAnswerError);
  });
});

describe('show map', () => {
  it('reads entries as HAProxy 3.0 and 2.6 list them, the version line proving the answer whole', () => {
    const answer =
      '0x7f9e5f441280 api.a.example.com kubebyon_slot_00001\n0x7f9e5e5c8100 b.example.com kubebyon_slot_00002\n\n3.0.11-1+deb13u5\n\n';
    expect(parseShowMap(answer)).toEqual(
      new Map([
        ['api.a.example.com', 'kubebyon_slot_00001'],
        ['b.example.com', 'kubebyon_slot_00002'],
      ]),
    );
    expect(parseShowMap('\n\n2.6.12-1+deb12u4\n\n')).toEqual(new Map());
    expect(showMapCommand('/d/m.map')).toBe('@1 show map /d/m.map;@1 show version');
  });

  it('keeps the first of duplicate keys (the one HAProxy matches)', () => {
    const answer = '0x1 a.example.com s1\n0x2 a.example.com s2\n\n3.0.11\n';
    expect(parseShowMap(answer).get('a.example.com')).toBe('s1');
  });

  it('refuses an error, a cut answer or anything unexpected', () => {
    for (const answer of [
      'Unknown map identifier. Please use #<id> or <file>.\n\n3.0.11\n',
      '0x1 a.example.com s1\n',
      '',
      '\n',
      '0x1 a.example.com\n\n3.0.11\n',
    ])
      expect(() => parseShowMap(answer), JSON.stringify(answer)).toThrow(RuntimeAnswerError);
  });
});
