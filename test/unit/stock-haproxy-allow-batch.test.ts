import pino from 'pino';
import { describe, expect, it } from 'vitest';
import { SlotAllowIndex } from '../../src/haproxy/allow-file.js';
import type { Operation } from '../../src/plan/plan.js';
import type { Reading } from '../../src/plan/reading.js';
import type { StockHaproxyConfig } from '../../src/providers/haproxy/config.js';
import type { MasterCli } from '../../src/providers/haproxy/master-cli.js';
import { applyAtRuntime } from '../../src/providers/haproxy/runtime.js';
import type { Session } from '../../src/providers/haproxy/session.js';

/** A master CLI that records each line and answers with what `answer` says. */
function session(answer: (line: string) => string): { s: Session; lines: string[] } {
  const lines: string[] = [];
  const cli = {
    send: async (line: string) => {
      lines.push(line);
      return answer(line);
    },
  } as unknown as MasterCli;
  const config = { ownedFile: '/etc/haproxy/kubebyon.cfg' } as StockHaproxyConfig;
  return { s: { config, cli, logger: pino({ level: 'silent' }), traffic: undefined }, lines };
}

const MAP = 'kubebyon.allow.map';
const add = (key: string): Operation => ({ kind: 'add_allow_entry', map: MAP, key, stage: 'entry' });
const del = (key: string): Operation => ({ kind: 'delete_allow_entry', map: MAP, key, stage: 'after' });
/** What runs: slot 1 restricted to 198.18.0.3/32; any other slot open. */
const reading = {
  state: {
    frontends: [],
    backends: [],
    maps: [
      {
        name: MAP,
        entries: new Map([
          ['kb_slot_00001', '1'],
          ['198.18.0.3/32|kb_slot_00001', '1'],
        ]),
      },
    ],
  },
} as unknown as Reading;
const index = () => new SlotAllowIndex((detail) => new Error(detail));
const SLOT1 = '/etc/haproxy/kubebyon.allow.kb_slot_00001.map';

describe('allow-map keys through the master CLI', () => {
  it("go to the slot's own map, several to a line, in the plan order, closed by show version", async () => {
    const { s, lines } = session(() => '3.0.11-1\n');
    const ops = [
      add('198.18.0.1/32|kb_slot_00001'),
      add('198.18.0.2/32|kb_slot_00001'),
      del('198.18.0.3/32|kb_slot_00001'),
    ];
    await applyAtRuntime(s, ops, reading, AbortSignal.timeout(5_000), index());
    expect(lines).toEqual([
      `@1 add map ${SLOT1} 198.18.0.1/32 1;@1 add map ${SLOT1} 198.18.0.2/32 1;` +
        `@1 del map ${SLOT1} 198.18.0.3/32;@1 show version`,
    ]);
  });

  it('an open slot restricted: its networks and refusals first, the open networks after', async () => {
    const { s, lines } = session(() => '3.0.11-1\n');
    const slot2 = '/etc/haproxy/kubebyon.allow.kb_slot_00002.map';
    const flag: Operation = { kind: 'add_allow_entry', map: MAP, key: 'kb_slot_00002', stage: 'flag' };
    await applyAtRuntime(
      s,
      [add('198.18.0.1/32|kb_slot_00002'), flag],
      reading,
      AbortSignal.timeout(5_000),
      index(),
    );
    expect(lines[0]?.split(';')).toEqual([
      `@1 add map ${slot2} 198.18.0.1/32 1`,
      `@1 add map ${slot2} ::/96 0`,
      `@1 add map ${slot2} ::ffff:0.0.0.0/96 0`,
      `@1 del map ${slot2} 0.0.0.0/0`,
      `@1 del map ${slot2} ::/0`,
      '@1 show version',
    ]);
  });

  it('stay within a line of 8 kB: 16 000 keys take about 200 lines, not 16 000', async () => {
    const { s, lines } = session(() => '3.0.11-1\n');
    const ops = Array.from({ length: 16_000 }, (_, i) =>
      add(`198.18.${i >> 8}.${i & 255}/32|kb_slot_${String(i >> 4).padStart(5, '0')}`),
    );
    // Every slot restricted already (a flag each), so each key is one `add map`.
    const flags = new Map(
      Array.from({ length: 1000 }, (_, i) => [`kb_slot_${String(i).padStart(5, '0')}`, '1']),
    );
    const restricted = { state: { frontends: [], backends: [], maps: [{ name: MAP, entries: flags }] } };
    await applyAtRuntime(s, ops, restricted as unknown as Reading, AbortSignal.timeout(30_000), index());
    expect(lines.length).toBeGreaterThan(100);
    expect(lines.length).toBeLessThan(300);
    for (const line of lines) expect(line.length).toBeLessThanOrEqual(8_000 + '@1 show version'.length + 1);
    expect(lines.join(';').split('@1 add map').length - 1).toBe(16_000);
  });

  it('an answer other than the version fails the change and undoes every command of the line', async () => {
    const { s, lines } = session((line) =>
      line.includes('add map') && line.includes('show version') ? 'Unknown map identifier.\n3.0.11-1\n' : '',
    );
    const ops = [add('198.18.0.1/32|kb_slot_00001'), del('198.18.0.3/32|kb_slot_00001')];
    await expect(applyAtRuntime(s, ops, reading, AbortSignal.timeout(5_000), index())).rejects.toThrow(
      /2 allow-map commands answered "Unknown map identifier/,
    );
    // Undone in reverse: the deleted network put back, the added one deleted.
    expect(lines.slice(1)).toEqual([
      `@1 add map ${SLOT1} 198.18.0.3/32 1`,
      `@1 del map ${SLOT1} 198.18.0.1/32`,
    ]);
  });

  it('a cut answer (no version) fails the change', async () => {
    const { s } = session((line) => (line.includes('show version') ? '' : ''));
    await expect(
      applyAtRuntime(s, [add('198.18.0.1/32|kb_slot_00001')], reading, AbortSignal.timeout(5_000), index()),
    ).rejects.toThrow(/1 allow-map commands answered ""/);
  });
});
