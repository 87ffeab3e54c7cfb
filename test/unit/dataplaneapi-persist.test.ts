import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { RawServer } from '../../src/haproxy/model.js';
import { withSectionServers, withServers } from '../../src/providers/dataplaneapi/persist.js';
import { type LineTags, parse, render } from '../../src/providers/dataplaneapi/raw-lines.js';
import { PROPERTY_TIMEOUT_MS } from '../support/property.js';

const tags: LineTags = { server: () => '', section: () => '' } as unknown as LineTags;

/** What `withServers` must give: the whole file parsed, the named backends edited, rendered again. */
function oracle(text: string, servers: ReadonlyMap<string, RawServer[]>): string {
  const c = parse(text);
  for (const s of c.sections) {
    const want = s.kind === 'backend' && s.name !== undefined ? servers.get(s.name) : undefined;
    if (want) s.lines = withSectionServers(s.lines, want, tags);
  }
  return render(c);
}

const names = ['b1', 'b2', 'slot.3', 'b4'];
const server = fc.record({
  name: fc.constantFrom('srv1', 'srv2', 'srv3'),
  address: fc.constantFrom('10.0.0.1', '10.0.0.2', '::1'),
  port: fc.integer({ min: 30000, max: 30003 }),
  check: fc.boolean(),
  tags: fc.constant({}),
});
const bodyLine = fc.oneof(
  fc.constantFrom(
    '  mode tcp',
    '  balance leastconn',
    '',
    '   ',
    '# a comment at the margin',
    '  # indented',
  ),
  server.map((s) => `  server ${s.name} ${s.address.includes(':') ? `[${s.address}]` : s.address}:${s.port}`),
);
const section = fc.tuple(
  fc.constantFrom('backend', 'backend', 'frontend', 'defaults', 'global'),
  fc.constantFrom(...names),
  fc.constantFrom('', ' # {"owner":"x"}', '  '),
  fc.array(bodyLine, { maxLength: 6 }),
);
const config = fc
  .tuple(
    fc.array(fc.constantFrom('# _version=7', '# a note', '', '# _md5hash=abc'), { maxLength: 3 }),
    fc.array(section, { maxLength: 8 }),
    fc.constantFrom('', '\n', '\n\n'),
  )
  .map(([head, sections, tail]) =>
    [...head, ...sections.flatMap(([kind, name, after, body]) => [`${kind} ${name}${after}`, ...body])]
      .join('\n')
      .concat(tail),
  );
const batch = fc
  .array(fc.tuple(fc.constantFrom(...names, 'absent'), fc.uniqueArray(server, { selector: (s) => s.name })))
  .map((pairs) => new Map(pairs));

describe('persistence: the file with some backends’ servers replaced', () => {
  it('gives what parsing the whole file, editing those sections and rendering it gives', {
    timeout: PROPERTY_TIMEOUT_MS,
  }, () => {
    fc.assert(
      fc.property(config, batch, (text, servers) => {
        expect(withServers(text, servers, tags)).toBe(oracle(text, servers));
      }),
      { numRuns: 500 },
    );
  });

  it('edits only the named backends, a line kept byte for byte when its endpoint is the same', () => {
    const text = [
      '# _version=3',
      'global',
      '  daemon',
      'backend a # {"k":"v"}',
      '  balance leastconn',
      '  server srv1 10.0.0.1:30000 check',
      '',
      'backend ab',
      '  server srv1 10.0.0.9:30000',
      '',
    ].join('\n');
    const servers = new Map([
      [
        'a',
        [
          { name: 'srv1', address: '10.0.0.1', port: 30000, check: false, tags: {} },
          { name: 'srv2', address: '10.0.0.2', port: 30001, check: false, tags: {} },
        ],
      ],
    ]);
    expect(withServers(text, servers, tags)).toBe(
      [
        'global',
        '  daemon',
        'backend a # {"k":"v"}',
        '  balance leastconn',
        '  server srv1 10.0.0.1:30000 check',
        '  server srv2 10.0.0.2:30001',
        '',
        'backend ab',
        '  server srv1 10.0.0.9:30000',
        '',
      ].join('\n'),
    );
  });
});
