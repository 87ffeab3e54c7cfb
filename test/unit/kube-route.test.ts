import pino from 'pino';
import { describe, expect, it } from 'vitest';
import type { PublishedStatus } from '../../src/store/desired-store.js';
import { RouteCache } from '../../src/store/kube-cache.js';
import {
  admits,
  appliedBy,
  fromStatus,
  MAX_SIGNATURES,
  objectName,
  olderVersion,
  parseRoute,
  type RouteSpec,
  restampedSpec,
  sameInput,
  sameRecord,
  tombstoneSpec,
  toRecord,
  toStatus,
  upsertSpec,
} from '../../src/store/kube-route.js';

const input = (host = 'a.example.com') => ({ name: 'a', host, target: { nodePort: 30001 } });
const spec = (over: Partial<RouteSpec> = {}): RouteSpec => ({
  cluster: 'a',
  host: 'a.example.com',
  target: { nodePort: 30001 },
  claimedAt: 100,
  updatedAt: 200,
  ...over,
});
const raw = (name: string, resourceVersion: string, s: RouteSpec | object, status?: object) => ({
  metadata: { name, resourceVersion },
  spec: s,
  ...(status ? { status } : {}),
});

describe('objectName', () => {
  it('keeps a DNS-1123 subdomain and hashes anything else', () => {
    expect(objectName('demo')).toBe('demo');
    expect(objectName('team-a.prod')).toBe('team-a.prod');
    for (const odd of ['Demo', 'team_a', '-a', 'a-', 'a..b', 'x'.repeat(254)]) {
      expect(objectName(odd)).toMatch(/^h-[0-9a-f]{40}$/);
    }
    expect(objectName('team_a')).toBe(objectName('team_a'));
    expect(objectName('team_a')).not.toBe(objectName('team_b'));
    expect(objectName('x'.repeat(253))).toBe('x'.repeat(253));
  });
});

describe('parseRoute', () => {
  it('takes a valid object and refuses one whose cluster does not map to its name', () => {
    expect(parseRoute(raw('a', '5', spec()))).toEqual({
      route: { name: 'a', resourceVersion: '5', spec: spec() },
    });
    expect(parseRoute(raw('b', '5', spec()))).toMatchObject({ problem: expect.stringContaining('map') });
    expect(parseRoute(raw('a', '5', { cluster: 'a' }))).toMatchObject({
      problem: expect.stringContaining('invalid spec'),
    });
    const hashed = spec({ cluster: 'Team_A' });
    expect(parseRoute(raw(objectName('Team_A'), '1', hashed))).toMatchObject({ route: { spec: hashed } });
  });
});

describe('spec.authorizedNetworks', () => {
  it('reads a list in the canonical form, sorted, and a record carries it; an empty one is no field', () => {
    const parsed = parseRoute(
      raw('a', '5', spec({ authorizedNetworks: ['2001:DB8::/32', '10.0.0.1', '10.0.0.0/8'] })),
    );
    expect(parsed).toEqual({
      route: {
        name: 'a',
        resourceVersion: '5',
        spec: { ...spec(), authorizedNetworks: ['10.0.0.0/8', '10.0.0.1/32', '2001:db8::/32'] },
      },
    });
    if (!('route' in parsed)) throw new Error('expected a route');
    expect(toRecord(parsed.route.spec)).toEqual({
      name: 'a',
      host: 'a.example.com',
      target: { nodePort: 30001 },
      authorizedNetworks: ['10.0.0.0/8', '10.0.0.1/32', '2001:db8::/32'],
      claimedAt: 100,
      updatedAt: 200,
    });
    const empty = parseRoute(raw('a', '6', spec({ authorizedNetworks: [] })));
    expect(empty).toEqual({ route: { name: 'a', resourceVersion: '6', spec: spec() } });
  });

  it.each([
    [['10.0.0.5/24'], /authorizedNetworks\[0\]: network_host_bits_set/],
    [['10.0.0.1', '10.0.0.1/32'], /authorizedNetworks\[1\]: network_duplicate/],
    [['::1.2.3.4'], /network_ipv4_mapped/],
    [['nope'], /network_invalid/],
    [Array.from({ length: 65 }, (_, i) => `10.${i}.0.0/16`), /authorizedNetworks: too_many_networks/],
    [[5], /invalid spec/],
    ['10.0.0.0/8', /invalid spec/],
  ])('refuses an object whose list is %j, like any invalid spec', (networks, problem) => {
    expect(parseRoute(raw('a', '5', { ...spec(), authorizedNetworks: networks }))).toEqual({
      problem: expect.stringMatching(problem),
    });
  });

  it('writes the list of an input, none for an open cluster, and compares lists in what is the same input', () => {
    const listed = { ...input(), authorizedNetworks: ['10.0.0.0/8'] };
    const written = upsertSpec(spec(), listed, undefined, 150);
    expect(written).toMatchObject({ authorizedNetworks: ['10.0.0.0/8'], claimedAt: 100 });
    expect(upsertSpec(written, input(), undefined, 150)).not.toHaveProperty('authorizedNetworks');
    expect(upsertSpec(written, { ...input(), authorizedNetworks: [] }, undefined, 150)).not.toHaveProperty(
      'authorizedNetworks',
    );
    expect(sameInput(written, listed)).toBe(true);
    expect(sameInput(written, input())).toBe(false);
    expect(sameInput(spec(), { ...input(), authorizedNetworks: [] })).toBe(true);
    expect(sameInput(written, { ...input(), authorizedNetworks: ['10.0.0.0/16'] })).toBe(false);
    expect(sameRecord(written, { ...written, authorizedNetworks: ['10.0.0.0/16'] })).toBe(false);
  });
});

describe('the stamp rule', () => {
  const stored = spec({ signedAt: 10, signatures: ['s1'] });
  it('admits a newer write, or one as old with an unseen signature; refuses older and repeated', () => {
    expect(admits(stored, { signedAt: 11, signature: 's1' })).toBe(true);
    expect(admits(stored, { signedAt: 10, signature: 's2' })).toBe(true);
    expect(admits(stored, { signedAt: 10, signature: 's1' })).toBe(false);
    expect(admits(stored, { signedAt: 9, signature: 's9' })).toBe(false);
    expect(appliedBy(stored, { signedAt: 10, signature: 's1' })).toBe(true);
    expect(appliedBy(stored, { signedAt: 10, signature: 's2' })).toBe(false);
  });
  it('always admits unsigned writes and writes to unsigned or absent specs', () => {
    expect(admits(stored, undefined)).toBe(true);
    expect(admits(spec(), { signedAt: 1, signature: 's' })).toBe(true);
    expect(admits(undefined, { signedAt: 1, signature: 's' })).toBe(true);
  });
  it('records the stamp: signatures accumulate within one second (at most 64) and reset on a newer one', () => {
    let s = upsertSpec(undefined, input(), { signedAt: 5, signature: 'x0' }, 1000);
    for (let i = 1; i < 70; i++) s = upsertSpec(s, input(), { signedAt: 5, signature: `x${i}` }, 1000);
    expect(s.signatures).toHaveLength(MAX_SIGNATURES);
    expect(s.signatures?.at(-1)).toBe('x69');
    expect(admits(s, { signedAt: 5, signature: 'x69' })).toBe(false);
    s = upsertSpec(s, input(), { signedAt: 6, signature: 'y' }, 1000);
    expect(s).toMatchObject({ signedAt: 6, signatures: ['y'] });
    // An unsigned write keeps what protects the cluster against older signed ones.
    expect(upsertSpec(s, input(), undefined, 1000)).toMatchObject({ signedAt: 6, signatures: ['y'] });
  });
});

describe('spec versions', () => {
  it('keeps claimedAt on the same host, takes a new one on a new host or a revived tombstone', () => {
    const same = upsertSpec(spec(), input(), undefined, 150);
    expect(same).toMatchObject({ claimedAt: 100, updatedAt: 201 });
    expect(upsertSpec(spec(), input('b.example.com'), undefined, 500)).toMatchObject({
      claimedAt: 500,
      updatedAt: 500,
    });
    const tomb = tombstoneSpec(spec(), { signedAt: 3, signature: 't' }, 150);
    expect(tomb).toMatchObject({ deleted: true, updatedAt: 201, host: 'a.example.com', signedAt: 3 });
    expect(toRecord(tomb)).toBeUndefined();
    const revived = upsertSpec(tomb, input(), { signedAt: 4, signature: 'r' }, 160);
    expect(revived).toMatchObject({ claimedAt: 160, updatedAt: 202 });
    expect(revived.deleted).toBeUndefined();
    expect(toRecord(revived)).toEqual({ ...input(), claimedAt: 160, updatedAt: 202 });
  });
  it('restamps an unchanged spec without a new version', () => {
    expect(restampedSpec(spec(), { signedAt: 9, signature: 'q' })).toEqual({
      ...spec(),
      signedAt: 9,
      signatures: ['q'],
    });
  });
});

describe('olderVersion', () => {
  it('compares integer resourceVersions as numbers, and nothing else', () => {
    expect(olderVersion('9', '10')).toBe(true);
    expect(olderVersion('10', '9')).toBe(false);
    expect(olderVersion('10', '10')).toBe(false);
    expect(olderVersion('123456789012345678901', '123456789012345678902')).toBe(true);
    expect(olderVersion('abc', '10')).toBe(false);
    expect(olderVersion('9', undefined)).toBe(false);
  });
});

describe('status mapping', () => {
  it('maps PublishedStatus to the CRD fields and back, a missing field reading as null', () => {
    const p: PublishedStatus = {
      state: 'active',
      reason: null,
      api_endpoint: 'a.example.com:443',
      last_applied_at: '2024-01-01T00:00:00Z',
      observed: 7,
      instances: [{ name: 'h0', state: 'applied', reason: 'x', last_applied_at: null }],
    };
    expect(toStatus(p)).toEqual({
      state: 'active',
      reason: null,
      apiEndpoint: 'a.example.com:443',
      lastAppliedAt: '2024-01-01T00:00:00Z',
      observedUpdatedAt: 7,
      instances: [{ name: 'h0', state: 'applied', reason: 'x', lastAppliedAt: null }],
    });
    expect(fromStatus(toStatus(p))).toEqual(p);
    expect(fromStatus({ state: 'active', observedUpdatedAt: 7 })).toEqual({
      ...p,
      api_endpoint: null,
      last_applied_at: null,
      instances: [],
    });
    expect(fromStatus({})).toBeUndefined();
  });
});

describe('RouteCache', () => {
  const logger = pino({ level: 'silent' });
  it('never goes back to an older version, and tells listeners of observed record changes only', () => {
    const cache = new RouteCache(logger);
    const heard: string[] = [];
    cache.onChange((names) => heard.push(...names));
    cache.take(raw('a', '10', spec({ host: 'new.example.com' })), 'own');
    cache.take(raw('a', '9', spec({ host: 'old.example.com' })), 'observed');
    expect(cache.get('a')?.host).toBe('new.example.com');
    expect(heard).toEqual([]);
    // A status-only update is no change of the desired state.
    cache.take(raw('a', '11', spec({ host: 'new.example.com' }), { state: 'active' }), 'observed');
    expect(heard).toEqual([]);
    cache.take(raw('a', '12', spec({ host: 'other.example.com', updatedAt: 300 })), 'observed');
    expect(heard).toEqual(['a']);
    expect(cache.list().map((r) => r.host)).toEqual(['other.example.com']);
  });
  it('keeps a deletion of its own against late events, and a newer version against an old delete', () => {
    const cache = new RouteCache(logger);
    cache.take(raw('a', '10', spec()), 'own');
    cache.drop('a', '10', 'own');
    cache.take(raw('a', '10', spec()), 'observed');
    expect(cache.get('a')).toBeUndefined();
    cache.take(raw('a', '15', spec()), 'observed');
    expect(cache.get('a')).toBeDefined();
    cache.drop('a', '12', 'observed');
    expect(cache.get('a')).toBeDefined();
    cache.drop('a', '15', 'observed');
    expect(cache.get('a')).toBeUndefined();
  });
  it('hides tombstones and objects that do not map back, and lists by name', () => {
    const cache = new RouteCache(logger);
    cache.take(raw('b', '1', spec({ cluster: 'b' })), 'observed');
    cache.take(raw('a', '2', spec()), 'observed');
    cache.take(raw('c', '3', spec({ cluster: 'c', deleted: true })), 'observed');
    cache.take(raw('d', '4', spec({ cluster: 'e' })), 'observed');
    expect(cache.list().map((r) => r.name)).toEqual(['a', 'b']);
    expect(cache.get('c')).toBeUndefined();
    expect(cache.route('c')?.spec.deleted).toBe(true);
    expect(cache.get('e')).toBeUndefined();
  });
});
