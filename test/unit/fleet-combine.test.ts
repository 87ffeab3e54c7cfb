import { describe, expect, it } from 'vitest';
import { combineOutcomes, combineStatuses, fromPublished, toPublished } from '../../src/fleet/combine.js';
import type { ClusterRecord } from '../../src/model/cluster.js';
import type { ClusterState, ClusterStatus } from '../../src/reconcile/status.js';
import type { PublishedStatus } from '../../src/store/desired-store.js';

// Several HAProxy instances' answers made one: what a caller of GET /v1/clusters/:name sees.

const status = (state: ClusterState, over: Partial<ClusterStatus> = {}): ClusterStatus => ({
  name: 'demo',
  host: 'demo.example.com',
  authorized_networks: [],
  api_endpoint: state === 'applied' ? 'demo.example.com:443' : null,
  state,
  reason: state === 'applied' ? null : `${state} because`,
  last_applied_at: state === 'applied' ? '2025-01-01T00:00:00.000Z' : null,
  backend: state === 'applied' ? 'kubebyon_slot_1' : null,
  servers: state === 'applied' ? ['10.0.0.1:30443'] : [],
  ...over,
});

const record: ClusterRecord = {
  name: 'demo',
  host: 'demo.example.com',
  target: { nodePort: 30443 },
  claimedAt: 1_000,
  updatedAt: 2_000,
};

describe('combineStatuses', () => {
  it('is undefined when no instance knows the cluster', () => {
    expect(combineStatuses([])).toBeUndefined();
    expect(
      combineStatuses([
        { instance: 'a', status: undefined },
        { instance: 'b', status: undefined },
      ]),
    ).toBeUndefined();
  });

  it('is applied when every instance is, since the latest of them applied it', () => {
    const combined = combineStatuses([
      { instance: 'a', status: status('applied', { last_applied_at: '2025-01-01T00:00:02.000Z' }) },
      { instance: 'b', status: status('applied', { last_applied_at: '2025-01-01T00:00:09.000Z' }) },
      { instance: 'c', status: status('applied', { last_applied_at: '2025-01-01T00:00:05.000Z' }) },
    ]);
    expect(combined).toMatchObject({
      name: 'demo',
      state: 'applied',
      reason: null,
      api_endpoint: 'demo.example.com:443',
      last_applied_at: '2025-01-01T00:00:09.000Z',
      backend: 'kubebyon_slot_1',
    });
    expect(combined?.instances).toEqual([
      { name: 'a', state: 'applied', reason: null, last_applied_at: '2025-01-01T00:00:02.000Z' },
      { name: 'b', state: 'applied', reason: null, last_applied_at: '2025-01-01T00:00:09.000Z' },
      { name: 'c', state: 'applied', reason: null, last_applied_at: '2025-01-01T00:00:05.000Z' },
    ]);
  });

  it('is not applied while one instance is behind, and names it and why', () => {
    const combined = combineStatuses([
      { instance: 'a', status: status('applied') },
      { instance: 'b', status: status('pending', { reason: null }) },
    ]);
    expect(combined).toMatchObject({ state: 'pending', reason: 'b: pending', last_applied_at: null });
    expect(combined?.instances?.map((i) => [i.name, i.state])).toEqual([
      ['a', 'applied'],
      ['b', 'pending'],
    ]);
  });

  it.each([
    [['applied', 'degraded'], 'degraded'],
    [['degraded', 'pending'], 'pending'],
    [['pending', 'error'], 'error'],
    [['error', 'rejected'], 'rejected'],
    [['rejected', 'applied'], 'rejected'],
    [['applied', 'error', 'degraded', 'pending'], 'error'],
  ] as Array<[ClusterState[], ClusterState]>)('takes the worst state: %j gives %s', (states, worst) => {
    const combined = combineStatuses(
      states.map((state, i) => ({ instance: `i${i}`, status: status(state) })),
    );
    expect(combined?.state).toBe(worst);
    // Every instance that is not applied is named, in instance order.
    const behind = states.flatMap((s, i) => (s === 'applied' ? [] : [`i${i}: ${s} because`]));
    expect(combined?.reason).toBe(behind.join('; '));
  });

  it('has no last_applied_at while any instance has none, and the worst one`s endpoint', () => {
    const combined = combineStatuses([
      { instance: 'a', status: status('applied') },
      { instance: 'b', status: status('degraded', { api_endpoint: 'demo.example.com:8443' }) },
    ]);
    expect(combined?.last_applied_at).toBeNull();
    expect(combined?.api_endpoint).toBe('demo.example.com:8443');
    // The worst one has none: the first instance's stands.
    expect(
      combineStatuses([
        { instance: 'a', status: status('applied') },
        { instance: 'b', status: status('error') },
      ])?.api_endpoint,
    ).toBe('demo.example.com:443');
  });

  it('leaves out an instance that does not know the cluster', () => {
    const combined = combineStatuses([
      { instance: 'a', status: undefined },
      { instance: 'b', status: status('applied') },
    ]);
    expect(combined?.state).toBe('applied');
    expect(combined?.instances?.map((i) => i.name)).toEqual(['b']);
  });
});

describe('combineOutcomes', () => {
  it('is ok when every instance is, changed when any changed', () => {
    expect(
      combineOutcomes([
        { instance: 'a', outcome: { ok: true, changed: false } },
        { instance: 'b', outcome: { ok: true, changed: true } },
      ]),
    ).toEqual({ ok: true, changed: true });
    expect(combineOutcomes([{ instance: 'a', outcome: { ok: true, changed: false } }])).toEqual({
      ok: true,
      changed: false,
    });
  });

  it('fails when any instance failed, naming each failure by instance', () => {
    expect(
      combineOutcomes([
        { instance: 'a', outcome: { ok: false, changed: false, error: 'connection refused' } },
        { instance: 'b', outcome: { ok: true, changed: true } },
        { instance: 'c', outcome: { ok: false, changed: false } },
      ]),
    ).toEqual({ ok: false, changed: true, error: 'a: connection refused; c: failed' });
  });
});

describe('fromPublished (a replica that does not lead)', () => {
  const published = (over: Partial<PublishedStatus> = {}): PublishedStatus => ({
    state: 'applied',
    reason: null,
    api_endpoint: 'demo.example.com:443',
    last_applied_at: '2025-01-01T00:00:00.000Z',
    observed: record.updatedAt,
    instances: [{ name: 'a', state: 'applied', reason: null, last_applied_at: '2025-01-01T00:00:00.000Z' }],
    ...over,
  });
  const pending = {
    name: 'demo',
    host: 'demo.example.com',
    authorized_networks: [],
    api_endpoint: null,
    state: 'pending',
    reason: null,
    last_applied_at: null,
    backend: null,
    servers: [],
  };

  it('is pending while nothing is published', () => {
    expect(fromPublished(record, undefined)).toEqual(pending);
  });

  it('is pending while the published status describes another version of the cluster', () => {
    expect(fromPublished(record, published({ observed: record.updatedAt - 1 }))).toEqual(pending);
    expect(fromPublished(record, published({ observed: record.updatedAt + 1 }))).toEqual(pending);
  });

  it('is what the leader published once it observed the stored version', () => {
    expect(fromPublished(record, published())).toEqual({
      ...pending,
      api_endpoint: 'demo.example.com:443',
      state: 'applied',
      last_applied_at: '2025-01-01T00:00:00.000Z',
      instances: published().instances,
    });
    const failed = fromPublished(record, published({ state: 'error', reason: 'a: down', instances: [] }));
    expect(failed).toMatchObject({ state: 'error', reason: 'a: down' });
    expect(failed).not.toHaveProperty('instances');
  });

  it("shows the stored record's authorized networks, whatever the leader published", () => {
    const listed = { ...record, authorizedNetworks: ['10.0.0.0/8', '2001:db8::/32'] };
    expect(fromPublished(listed, undefined).authorized_networks).toEqual(['10.0.0.0/8', '2001:db8::/32']);
    expect(fromPublished(listed, published()).authorized_networks).toEqual(['10.0.0.0/8', '2001:db8::/32']);
  });

  it('reads back what toPublished made', () => {
    const combined = combineStatuses([
      { instance: 'a', status: status('applied') },
      { instance: 'b', status: status('degraded') },
    ]);
    if (!combined) throw new Error('expected a status');
    const back = fromPublished(record, toPublished(combined, record));
    expect(back).toMatchObject({
      state: combined.state,
      reason: combined.reason,
      api_endpoint: combined.api_endpoint,
      last_applied_at: combined.last_applied_at,
      instances: combined.instances,
    });
  });
});
