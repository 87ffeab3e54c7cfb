import { describe, expect, it } from 'vitest';
import type { PoolReport } from '../../src/plan/operations.js';
import type { Operation } from '../../src/plan/plan.js';
import { passKind, reloadReason } from '../../src/reconcile/routing.js';

const kinds = (...reasons: string[]) => passKind(new Set(reasons));
const slot = (n: number): Operation => ({
  kind: 'create_backend',
  backend: { name: `kubebyon_slot_0000${n}`, balance: 'leastconn' },
});
const pool = (created: number): PoolReport => ({
  map: 'm',
  size: 6,
  free: 2,
  growthDeferred: false,
  created,
  assignments: new Map(),
});

describe('what asked for a pass', () => {
  it('grows the pool ahead only when no cluster change waits on the pass', () => {
    for (const r of [['start'], ['resync'], ['pool_growth'], ['start', 'resync']])
      expect(kinds(...r).grow, r.join()).toBe('ahead');
    for (const r of [['webhook'], ['sync'], ['api'], ['retry'], ['haproxy_reloaded'], ['resync', 'webhook']])
      expect(kinds(...r).grow, r.join()).toBe('when_needed');
  });

  it('reads afresh after a start, a resync, a reload by anyone or a failure, whoever else asked', () => {
    for (const r of [
      ['start'],
      ['resync'],
      ['haproxy_reloaded'],
      ['provider_back'],
      ['retry', 'api'],
      ['webhook', 'resync'],
    ])
      expect(kinds(...r).fresh, r.join()).toBe(true);
    for (const r of [['webhook'], ['pool_growth'], ['sync', 'api'], ['nodes']])
      expect(kinds(...r).fresh, r.join()).toBe(false);
  });

  it('is a repair only when nothing but a resync or a reload by someone else asked for it', () => {
    expect(kinds('resync').repair).toBe(true);
    expect(kinds('haproxy_reloaded', 'resync').repair).toBe(true);
    expect(kinds('resync', 'webhook').repair).toBe(false);
    expect(kinds('start').repair).toBe(false);
  });
});

describe('reloadReason', () => {
  const frontend: Operation = { kind: 'delete_frontend', name: 'old' };
  it('pool_growth for slot creations alone, whatever runtime changes come with them', () => {
    const ops: Operation[] = [
      slot(5),
      slot(6),
      { kind: 'delete_map_entry', map: 'm', host: 'h', backend: 's' },
    ];
    expect(reloadReason({ operations: ops, conflicts: [], pool: pool(2) }, false)).toBe('pool_growth');
    expect(reloadReason({ operations: ops, conflicts: [], pool: pool(2) }, true)).toBe('pool_growth');
  });
  it('structure for any other structure change, repair when only a resync or a foreign reload asked', () => {
    const ops = [slot(5), frontend];
    expect(reloadReason({ operations: ops, conflicts: [], pool: pool(1) }, false)).toBe('structure');
    expect(reloadReason({ operations: ops, conflicts: [], pool: pool(1) }, true)).toBe('repair');
    expect(reloadReason({ operations: [frontend], conflicts: [] }, false)).toBe('structure');
  });
});
