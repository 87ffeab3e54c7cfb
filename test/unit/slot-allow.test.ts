import { isIP } from 'node:net';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { allowKeys, isAllowKey } from '../../src/haproxy/allow-keys.js';
import {
  DENY_VALUE,
  keysOfSlotMap,
  OPEN_NETWORKS,
  type SlotMapOp,
  slotAllowMapName,
  slotEntries,
  slotMapOps,
  slotMapSteps,
  slotMapText,
} from '../../src/haproxy/slot-allow.js';
import { keysBySlot, planSlotAllow } from '../../src/plan/allow.js';
import type { Operation } from '../../src/plan/operations.js';
import { sortOperations } from '../../src/plan/plan.js';
import { PROPERTY_TIMEOUT_MS } from '../support/property.js';

const MAP = 'kubebyon.allow.map';
const SLOTS = ['kb_slot_00001', 'kb_slot_00002'];
const NETS = [
  '0.0.0.0/0',
  '::/0',
  '198.18.0.0/24',
  '198.18.0.1/32',
  '2001:db8::/32',
  '127.0.0.1/32',
  '::/96',
  '::1/128',
];

const route = (networks: string[]) => ({ host: 'api.example.com', cluster: 'c', servers: [], networks });

/** Sources (addresses only, never dialled) inside and outside the networks above, of every kind HAProxy reads. */
const PROBES = [
  '127.0.0.1',
  '127.0.0.2',
  '198.18.0.1',
  '198.18.0.200',
  '203.0.113.5',
  '2001:db8::1',
  '2001:db9::1',
  '::1',
  '::2',
  '::ffff:127.0.0.1',
  '::ffff:198.18.0.1',
  '::ffff:198.18.0.200',
  '::ffff:203.0.113.5',
  // 6to4 of 198.18.0.1 and of 203.0.113.5.
  '2002:c612:1::1',
  '2002:cb00:7105::1',
];

// ---- A model of HAProxy's `src,map_ip(<file>) -m str 1` (checked on HAProxy 2.6, 3.0 and 3.2) ----

interface Address {
  family: 4 | 6;
  bits: bigint;
}

function parseAddress(text: string): Address {
  const family = isIP(text);
  if (family === 4) return { family, bits: v4Bits(text) };
  if (family !== 6) throw new RangeError(`not an address: ${text}`);
  let t = text;
  // A dotted quad at the end stands for the last two groups.
  const quad = /(\d+\.\d+\.\d+\.\d+)$/.exec(t)?.[1];
  if (quad !== undefined) {
    const v = v4Bits(quad);
    t = `${t.slice(0, t.length - quad.length)}${(v >> 16n).toString(16)}:${(v & 0xffffn).toString(16)}`;
  }
  const [head, tail] = t.includes('::') ? t.split('::') : [t, undefined];
  const groups = (s: string | undefined) => (s ? s.split(':') : []);
  const h = groups(head);
  const tl = groups(tail);
  const all = tail === undefined ? h : [...h, ...Array(8 - h.length - tl.length).fill('0'), ...tl];
  if (all.length !== 8) throw new RangeError(`not an address: ${text}`);
  return { family: 6, bits: all.reduce((acc, g) => (acc << 16n) | BigInt(`0x${g}`), 0n) };
}

function v4Bits(text: string): bigint {
  return text.split('.').reduce((acc, o) => (acc << 8n) | BigInt(o), 0n);
}

interface Entry extends Address {
  prefix: number;
  value: string;
}

/** The value of the longest prefix among `entries` of `family` that holds `bits`; undefined: none does. */
function longest(entries: readonly Entry[], family: 4 | 6, bits: bigint): string | undefined {
  const width = family === 4 ? 32n : 128n;
  let best: Entry | undefined;
  for (const e of entries) {
    if (e.family !== family) continue;
    const host = width - BigInt(e.prefix);
    if (e.bits >> host !== bits >> host) continue;
    if (!best || e.prefix > best.prefix) best = e;
  }
  return best?.value;
}

/** The IPv4 address an IPv6 one carries for HAProxy: mapped, compatible (::1 is 0.0.0.1) or 6to4. */
function embeddedV4(bits: bigint): bigint | undefined {
  if (bits >> 32n === 0xffffn || bits >> 32n === 0n) return bits & 0xffffffffn;
  if (bits >> 112n === 0x2002n) return (bits >> 80n) & 0xffffffffn;
  return undefined;
}

/**
 * Whether a map holding `entries` (network -> value) lets a source in: the longest prefix that holds it must
 * say `1`. An IPv4 source no IPv4 entry holds is looked up as `::ffff:a.b.c.d`; an IPv6 source no IPv6 entry
 * holds, by the IPv4 address it carries (if any).
 */
function admits(entries: Iterable<readonly [string, string]>): (source: string) => boolean {
  const list: Entry[] = [];
  for (const [network, value] of entries) {
    const [address, prefix] = network.split('/') as [string, string];
    list.push({ ...parseAddress(address), prefix: Number(prefix), value });
  }
  return (source) => {
    const a = parseAddress(source);
    let value: string | undefined;
    if (a.family === 4) value = longest(list, 4, a.bits) ?? longest(list, 6, (0xffffn << 32n) | a.bits);
    else {
      value = longest(list, 6, a.bits);
      const v4 = embeddedV4(a.bits);
      if (value === undefined && v4 !== undefined) value = longest(list, 4, v4);
    }
    return value === '1';
  };
}

/** HAProxy's map as the runtime API treats it: `add map` adds an entry, `del map` drops every one of its key. */
class RuntimeMap {
  readonly entries: Array<[string, string]>;
  constructor(entries: ReadonlyMap<string, string>) {
    this.entries = [...entries];
  }
  has(network: string): boolean {
    return this.entries.some(([n]) => n === network);
  }
  add(network: string, value: string) {
    this.entries.push([network, value]);
  }
  del(network: string) {
    for (let i = this.entries.length - 1; i >= 0; i--)
      if ((this.entries[i] as [string, string])[0] === network) this.entries.splice(i, 1);
  }
  get asMap(): Map<string, string> {
    return new Map(this.entries);
  }
}

const keysOf = (slot: string, nets: readonly string[], dualStack: boolean) =>
  new Set(allowKeys(slot, nets, dualStack));

describe('the model of map_ip this file checks against', () => {
  it('takes the longest prefix, and falls back across families as HAProxy does', () => {
    const m = admits([
      ['198.18.0.0/24', '1'],
      ['198.18.0.1/32', '0'],
      ['2001:db8::/32', '1'],
      ['::/96', '0'],
    ]);
    expect(m('198.18.0.2')).toBe(true);
    expect(m('198.18.0.1')).toBe(false);
    expect(m('2001:db8::1')).toBe(true);
    expect(m('2001:db9::1')).toBe(false);
    // ::1 is held by ::/96 (0): not looked up as 0.0.0.1.
    expect(m('::1')).toBe(false);
    // No IPv6 entry holds these: judged by the IPv4 address inside.
    expect(m('::ffff:198.18.0.2')).toBe(true);
    expect(m('::ffff:198.18.0.1')).toBe(false);
    expect(m('2002:c612:2::1')).toBe(true);
    expect(m('2002:c612:1::1')).toBe(false);
    // An IPv4 source no IPv4 entry holds is looked up as mapped IPv6.
    expect(admits([['::ffff:0.0.0.0/96', '1']])('203.0.113.5')).toBe(true);
    expect(admits([['::/0', '1']])('203.0.113.5')).toBe(true);
    expect(admits([['0.0.0.0/0', '1']])('::1')).toBe(true);
    expect(admits([])('::1')).toBe(false);
  });
});

describe("the slots' allow maps", () => {
  it('names a map per slot beside the logical allow map', () => {
    expect(slotAllowMapName(MAP, 'kb_slot_00007')).toBe('kubebyon.allow.kb_slot_00007.map');
    expect(slotAllowMapName('o', 'kb_slot_00007')).toBe('o.kb_slot_00007.map');
  });

  it('holds the open networks for a slot without a flag; a restricted slot its networks and the refusals', () => {
    const open = new Map(OPEN_NETWORKS.map((n) => [n, '1']));
    expect(slotEntries('s', undefined)).toEqual(open);
    expect(slotEntries('s', new Set(['198.18.0.0/24|s']))).toEqual(open);
    expect([...slotEntries('s', new Set(['s', '198.18.0.0/24|s', '::1/128|s']))]).toEqual([
      ['198.18.0.0/24', '1'],
      ['::1/128', '1'],
      ['::/96', DENY_VALUE],
      ['::ffff:0.0.0.0/96', DENY_VALUE],
    ]);
    // A list holding a refusal's network itself: that entry allows, once.
    expect([...slotEntries('s', new Set(['s', '::/96|s', '::1/128|s']))]).toEqual([
      ['::/96', '1'],
      ['::1/128', '1'],
      ['::ffff:0.0.0.0/96', DENY_VALUE],
    ]);
    expect([...slotEntries('s', keysOf('s', ['0.0.0.0/0'], true))]).toEqual([
      ['0.0.0.0/0', '1'],
      ['::ffff:0.0.0.0/96', '1'],
      ['::/96', DENY_VALUE],
    ]);
    expect(slotMapText('s', new Set(['s', '198.18.0.0/24|s']))).toBe(
      '198.18.0.0/24 1\n::/96 0\n::ffff:0.0.0.0/96 0\n',
    );
    expect(slotMapText('s', undefined)).toBe('0.0.0.0/0 1\n::/0 1\n');
    expect(DENY_VALUE).not.toBe('1');
  });

  it('refuses to write a key that is not an allow key, or another slot’s', () => {
    expect(() => slotMapText('s', new Set(['s', '198.18.0.0/24 1|s']))).toThrow(/refusing/);
    expect(() => slotMapText('s', new Set(['s', '198.18.0.5/24|s']))).toThrow(/refusing/);
    expect(() => slotMapText('s', new Set(['t']))).toThrow(/refusing/);
    expect(() => slotMapText('s', new Set(['s', '198.18.0.0/24|t']))).toThrow(/refusing/);
  });

  it('reads a map back to the logical keys it stands for, a hand-edited entry too', () => {
    expect(keysOfSlotMap('s', slotEntries('s', undefined))).toEqual([]);
    expect(keysOfSlotMap('s', slotEntries('s', new Set(['s', '198.18.0.0/24|s'])))).toEqual([
      's',
      '198.18.0.0/24|s',
    ]);
    // The refusals are this module's; the same network allowing is the list's.
    expect(
      keysOfSlotMap(
        's',
        new Map([
          ['::/96', '1'],
          ['::ffff:0.0.0.0/96', DENY_VALUE],
        ]),
      ),
    ).toEqual(['s', '::/96|s']);
    // Anything else gives its key, unchecked (the planner deletes it).
    expect(keysOfSlotMap('s', new Map([['198.18.0.0/24', '2']]))).toEqual(['s', '198.18.0.0/24|s']);
    expect(keysOfSlotMap('s', new Map([['not a network', '1']]))).toEqual(['s', 'not a network|s']);
    expect(keysOfSlotMap('s', new Map([['10.0.0.0/8', DENY_VALUE]]))).toEqual(['s', '10.0.0.0/8|s']);
    // The open networks with anything more, or with a value changed: not open.
    expect(keysOfSlotMap('s', new Map([...slotEntries('s', undefined), ['::/96', '0']]))).toEqual([
      's',
      '0.0.0.0/0|s',
      '::/0|s',
    ]);
    expect(
      keysOfSlotMap(
        's',
        new Map([
          ['0.0.0.0/0', '1'],
          ['::/0', '0'],
        ]),
      ),
    ).toEqual(['s', '0.0.0.0/0|s', '::/0|s']);
    // Nothing at all is not open either: the flag alone (everyone refused).
    expect(keysOfSlotMap('s', new Map())).toEqual(['s']);
  });

  it('reads back the keys of every list it writes', () => {
    fc.assert(
      fc.property(
        fc.uniqueArray(fc.constantFrom(...NETS), { minLength: 1, maxLength: 6 }),
        fc.boolean(),
        (nets, dualStack) => {
          const keys = keysOf('s', nets, dualStack);
          const back = keysOfSlotMap('s', slotEntries('s', keys));
          expect(new Set(back)).toEqual(keys);
          expect(back).toHaveLength(keys.size);
          for (const k of back) expect(isAllowKey(k), k).toBe(true);
        },
      ),
      { numRuns: 200 },
    );
  });

  it('orders a step: additions, then values that change (deleted, added again), then deletions', () => {
    const map = slotAllowMapName(MAP, 's');
    const op = (kind: 'add' | 'delete', network: string, value: string): SlotMapOp => ({
      kind,
      map,
      slot: 's',
      network,
      value,
    });
    const flagged = new Set(['s', '198.18.0.0/24|s']);
    const steps = slotMapSteps(
      MAP,
      [
        { kind: 'add_allow_entry', key: '::/96|s' },
        { kind: 'add_allow_entry', key: '2001:db8::/32|s' },
        { kind: 'delete_allow_entry', key: '::/96|s' },
        { kind: 'delete_allow_entry', key: 's' },
        { kind: 'add_allow_entry', key: 's' },
      ],
      (slot) => (slot === 's' ? flagged : undefined),
    );
    expect(steps).toEqual([
      [op('delete', '::/96', DENY_VALUE), op('add', '::/96', '1')],
      [op('add', '2001:db8::/32', '1')],
      [op('delete', '::/96', '1'), op('add', '::/96', DENY_VALUE)],
      // Opened: the open networks first; the list's networks and the refusals after (the property below
      // says in which order they may go).
      [
        op('add', '0.0.0.0/0', '1'),
        op('add', '::/0', '1'),
        expect.objectContaining({ kind: 'delete' }),
        expect.objectContaining({ kind: 'delete' }),
        expect.objectContaining({ kind: 'delete' }),
        expect.objectContaining({ kind: 'delete' }),
      ],
      [
        op('add', '198.18.0.0/24', '1'),
        op('add', '2001:db8::/32', '1'),
        op('add', '::/96', DENY_VALUE),
        op('add', '::ffff:0.0.0.0/96', DENY_VALUE),
        op('delete', '0.0.0.0/0', '1'),
        op('delete', '::/0', '1'),
      ],
    ]);
    expect(new Set((steps[3] ?? []).slice(2))).toEqual(
      new Set([
        op('delete', '198.18.0.0/24', '1'),
        op('delete', '2001:db8::/32', '1'),
        op('delete', '::/96', DENY_VALUE),
        op('delete', '::ffff:0.0.0.0/96', DENY_VALUE),
      ]),
    );
    // The set it was given stays as it was; the flat list is the steps in order.
    expect(flagged).toEqual(new Set(['s', '198.18.0.0/24|s']));
    expect(
      slotMapOps(MAP, [{ kind: 'add_allow_entry', key: '::/96|s' }], (slot) =>
        slot === 's' ? flagged : undefined,
      ),
    ).toEqual([op('delete', '::/96', DENY_VALUE), op('add', '::/96', '1')]);
    // A network key of an open slot changes nothing at runtime.
    expect(slotMapSteps(MAP, [{ kind: 'add_allow_entry', key: '198.18.0.0/24|s' }], () => undefined)).toEqual(
      [[]],
    );
  });

  it('keeps letting ::1 in while a slot opens from a list that holds it', () => {
    // The refusal ::/96 (0) must go before ::1/128 (1): else ::1 is shut out between the two commands.
    const slot = 'kb_slot_00001';
    const keys = keysOf(slot, ['::/0'], false);
    const ops = [
      { kind: 'delete_allow_entry' as const, key: slot },
      { kind: 'delete_allow_entry' as const, key: `::/0|${slot}` },
      { kind: 'delete_allow_entry' as const, key: `::1/128|${slot}` },
    ];
    const m = new RuntimeMap(slotEntries(slot, keys));
    for (const op of slotMapOps(MAP, ops, () => keys)) {
      op.kind === 'add' ? m.add(op.network, op.value) : m.del(op.network);
      expect(admits(m.entries)('::1'), `after ${op.kind} ${op.network}`).toBe(true);
    }
    expect(m.asMap).toEqual(slotEntries(slot, undefined));
  });

  it('lets in what the README promises, and no more', () => {
    const slot = 'kb_slot_00001';
    const narrow = admits(slotEntries(slot, keysOf(slot, ['127.0.0.0/31', '::/64'], true)));
    expect(narrow('127.0.0.1')).toBe(true);
    expect(narrow('::ffff:127.0.0.1')).toBe(true);
    expect(narrow('::1')).toBe(true);
    expect(narrow('::ffff:127.0.0.2')).toBe(false);
    expect(narrow('127.0.0.2')).toBe(false);
    // ::2 is in ::/64 but is an IPv4-compatible source: ::/96 networks or narrower decide it.
    expect(narrow('::2')).toBe(false);
    const allV4 = admits(slotEntries(slot, keysOf(slot, ['0.0.0.0/0'], true)));
    expect(allV4('::ffff:127.0.0.2')).toBe(true);
    expect(allV4('203.0.113.5')).toBe(true);
    expect(allV4('::1')).toBe(false);
    expect(allV4('2001:db8::1')).toBe(false);
    // A 6to4 source no IPv6 network holds is judged by its IPv4 host.
    expect(allV4('2002:c612:1::1')).toBe(true);
    const allV6 = admits(slotEntries(slot, keysOf(slot, ['::/0'], true)));
    expect(allV6('127.0.0.1')).toBe(false);
    expect(allV6('::ffff:127.0.0.1')).toBe(false);
    expect(allV6('::1')).toBe(true);
    expect(allV6('2001:db8::1')).toBe(true);
    const open = admits(slotEntries(slot, undefined));
    for (const p of PROBES) expect(open(p), p).toBe(true);
  });

  it('changes lists step by step: no source gets in that neither list allows, none both allow is shut out', {
    timeout: PROPERTY_TIMEOUT_MS,
  }, () => {
    const list = fc.option(fc.uniqueArray(fc.constantFrom(...NETS), { maxLength: 5 }), { nil: undefined });
    fc.assert(
      fc.property(fc.tuple(list, list), fc.tuple(list, list), fc.boolean(), (from, to, dualStack) => {
        // Each slot: undefined is a slot no route holds; [] an open route; else a restricted one.
        const current = new Map<string, string>();
        SLOTS.forEach((slot, i) => {
          const nets = from[i];
          if (nets) for (const k of allowKeys(slot, nets, dualStack)) current.set(k, '1');
        });
        const bySlot = keysBySlot(current);
        const ops: Operation[] = [];
        SLOTS.forEach((slot, i) => {
          const nets = to[i];
          planSlotAllow({ map: MAP, dualStack, current: bySlot }, slot, nets ? route(nets) : undefined, ops);
        });
        const logical = sortOperations(ops).filter(
          (o): o is Extract<Operation, { kind: 'add_allow_entry' | 'delete_allow_entry' }> =>
            o.kind === 'add_allow_entry' || o.kind === 'delete_allow_entry',
        );
        const steps = slotMapSteps(MAP, logical, (slot) => bySlot.get(slot));
        expect(steps).toHaveLength(logical.length);
        const physical = slotMapOps(MAP, logical, (slot) => bySlot.get(slot));
        expect(physical).toEqual(steps.flat());
        const maps = new Map(SLOTS.map((s) => [s, new RuntimeMap(slotEntries(s, bySlot.get(s)))]));
        const target = keysBySlot(
          new Map(
            SLOTS.flatMap((slot, i) => {
              const nets = to[i];
              return nets ? allowKeys(slot, nets, dualStack).map((k) => [k, '1'] as const) : [];
            }),
          ),
        );
        const old = new Map(SLOTS.map((s) => [s, admits(slotEntries(s, bySlot.get(s)))]));
        const next = new Map(SLOTS.map((s) => [s, admits(slotEntries(s, target.get(s)))]));
        for (const op of physical) {
          const m = maps.get(op.slot) as RuntimeMap;
          expect(op.map).toBe(slotAllowMapName(MAP, op.slot));
          if (op.kind === 'add') {
            // Never a second entry of a network: `del map` would drop both.
            expect(m.has(op.network)).toBe(false);
            m.add(op.network, op.value);
          } else {
            // A deletion names the value it removes.
            expect(m.asMap.get(op.network)).toBe(op.value);
            m.del(op.network);
          }
          for (const slot of SLOTS) {
            const was = old.get(slot) as (source: string) => boolean;
            const will = next.get(slot) as (source: string) => boolean;
            const now = admits((maps.get(slot) as RuntimeMap).entries);
            const held = from[SLOTS.indexOf(slot)] !== undefined && to[SLOTS.indexOf(slot)] !== undefined;
            for (const p of PROBES) {
              // Never a client that neither list lets in (a restricted slot never opens to everyone).
              if (now(p)) expect(was(p) || will(p), `${slot} let ${p} in`).toBe(true);
              // A slot that a route holds before and after never shuts out a client both lists let in.
              if (held && was(p) && will(p)) expect(now(p), `${slot} shut ${p} out`).toBe(true);
            }
          }
        }
        for (const slot of SLOTS) {
          const m = maps.get(slot) as RuntimeMap;
          expect(m.entries).toHaveLength(m.asMap.size);
          expect(m.asMap).toEqual(slotEntries(slot, target.get(slot)));
        }
      }),
      { numRuns: 300 },
    );
  });
});
