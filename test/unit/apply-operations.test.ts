import { describe, expect, it } from 'vitest';
import type { HaproxyState, RawBackend, RawState } from '../../src/haproxy/model.js';
import { ConcurrentChangeError } from '../../src/model/errors.js';
import { applyOperations } from '../../src/plan/apply.js';
import { Registry } from '../../src/registry/registry.js';
import { ownFrontend as frontend, interpret, ownerTags, registry } from '../support/owner.js';

const backend: RawBackend = {
  name: 'kubebyon_a_0123456789ab',
  balance: 'leastconn',
  servers: [{ name: 'srv1', address: '127.0.0.1', port: 30001, check: true, tags: ownerTags() }],
  tags: ownerTags('a'),
};
const foreign: RawBackend = { name: 'console', balance: 'roundrobin', servers: [], tags: {} };
const state = (f = frontend()): HaproxyState => interpret({ frontends: [f], backends: [backend, foreign] });
const apply = (
  s: HaproxyState,
  ops: Parameters<typeof applyOperations>[1],
  tagger: Parameters<typeof applyOperations>[2] = registry,
): HaproxyState => applyOperations(s, ops, tagger).state;

describe('applyOperations: the one meaning of each operation', () => {
  it('asks for a new plan when an object is missing, or a creation finds its name taken', () => {
    const s = state();
    expect(() => apply(s, [{ kind: 'delete_backend', name: 'gone' }], registry)).toThrow(
      ConcurrentChangeError,
    );
    // Frontends and backends share one namespace.
    expect(() =>
      apply(
        s,
        [{ kind: 'create_backend', backend: { name: 'kubebyon_sni', balance: 'leastconn' } }],
        registry,
      ),
    ).toThrow(ConcurrentChangeError);
    expect(() =>
      apply(
        s,
        [
          {
            kind: 'update_server',
            backend: backend.name,
            server: { name: 'srv9', address: '127.0.0.2', port: 1, check: true },
            changes: [],
          },
        ],
        registry,
      ),
    ).toThrow(ConcurrentChangeError);
  });

  it("tags what it creates with the owner it is given, and keeps another owner's rules as they were", () => {
    const staging = new Registry('staging');
    const withForeignRule = state(
      frontend({
        rules: [
          { backend: 'kubebyon_a_0123456789ab', host: 'a.example.com', tags: staging.tags() },
          { backend: 'console', host: 'console.example.com', tags: { owner: 'production' } },
        ],
      }),
    );
    const next = apply(
      withForeignRule,
      [
        {
          kind: 'create_backend',
          backend: { name: 'kubebyon_b_0123456789ab', balance: 'leastconn' },
        },
        {
          kind: 'create_server',
          backend: 'kubebyon_b_0123456789ab',
          server: { name: 'srv1', address: '127.0.0.1', port: 30002, check: false },
        },
        {
          kind: 'set_switching_rules',
          frontend: 'kubebyon_sni',
          rules: [
            { backend: 'kubebyon_b_0123456789ab', host: 'b.example.com', owned: true },
            { backend: 'console', host: 'console.example.com', owned: false },
          ],
          added: [],
          removed: [],
        },
      ],
      staging,
    );
    const created = next.backends.find((b) => b.name === 'kubebyon_b_0123456789ab');
    expect(created?.tags).toEqual({ owner: 'staging' });
    expect(created?.owned).toBe(true);
    expect(created?.servers[0]?.tags).toEqual({ owner: 'staging' });
    expect(next.frontends[0]?.rules).toEqual([
      { backend: 'kubebyon_b_0123456789ab', host: 'b.example.com', tags: { owner: 'staging' }, owned: true },
      { backend: 'console', host: 'console.example.com', tags: { owner: 'production' }, owned: false },
    ]);
    // The input is left as it was: a failed apply can keep the state it started from.
    expect(withForeignRule.backends).toHaveLength(2);
  });

  it('refuses to keep a foreign rule that is not there (the plan was made from another state)', () => {
    expect(() =>
      apply(
        state(),
        [
          {
            kind: 'set_switching_rules',
            frontend: 'kubebyon_sni',
            rules: [{ backend: 'console', host: 'console.example.com', owned: false }],
            added: [],
            removed: [],
          },
        ],
        registry,
      ),
    ).toThrow(ConcurrentChangeError);
  });

  it('never changes the state it is given, and copies only what an operation touches', () => {
    const s: HaproxyState = interpret({
      frontends: [frontend({ sniMap: 'm.map' })],
      backends: [backend, foreign],
      maps: [{ name: 'm.map', entries: new Map([['a.example.com', backend.name]]) }],
    });
    const snapshot = structuredClone(s);
    const server = { name: 'srv1', address: '127.0.0.9', port: 30009, check: true };
    const next = apply(
      s,
      [
        { kind: 'update_server', backend: backend.name, server, changes: [] },
        { kind: 'create_server', backend: backend.name, server: { ...server, name: 'srv2' } },
        { kind: 'delete_map_entry', map: 'm.map', host: 'a.example.com', backend: backend.name },
        {
          kind: 'set_map_entry',
          map: 'm.map',
          host: 'b.example.com',
          backend: backend.name,
          previous: null,
          cluster: 'b',
        },
      ],
      registry,
    );
    expect(s).toEqual(snapshot);
    expect(next.backends[0]?.servers.map((x) => [x.name, x.port])).toEqual([
      ['srv1', 30009],
      ['srv2', 30009],
    ]);
    expect([...(next.maps?.[0]?.entries ?? [])]).toEqual([['b.example.com', backend.name]]);
    // Untouched objects are shared, not copied: a plan of a few operations costs no copy of the rest.
    expect(next.backends[1]).toBe(s.backends[1]);
    expect(next.frontends[0]).toBe(s.frontends[0]);
  });
});

describe('applyOperations: copy-on-write', () => {
  const many = (n: number): HaproxyState =>
    interpret({
      frontends: [frontend()],
      backends: Array.from({ length: n }, (_, i) => ({
        ...backend,
        name: `b${i}`,
        servers: [{ ...(backend.servers[0] as RawBackend['servers'][number]) }],
      })),
      maps: [{ name: 'sni', entries: new Map([['a.example.com', 'b0']]) }],
    } satisfies RawState);

  it('leaves its input as it was and shares only the objects no operation touched', () => {
    const before = many(50);
    const snapshot = structuredClone(before);
    const server = { name: 'srv1', address: '127.0.0.9', port: 30009, check: false };
    const after = apply(
      before,
      [
        { kind: 'update_server', backend: 'b3', server, changes: [] },
        { kind: 'delete_server', backend: 'b4', server },
        {
          kind: 'set_map_entry',
          map: 'sni',
          host: 'c.example.com',
          backend: 'b5',
          previous: null,
          cluster: 'c',
        },
      ],
      registry,
    );
    expect(before).toEqual(snapshot);
    expect(after.backends[3]?.servers[0]).toMatchObject({ address: '127.0.0.9', port: 30009, check: false });
    expect(after.backends[4]?.servers).toEqual([]);
    expect(after.maps?.[0]?.entries.get('c.example.com')).toBe('b5');
    const shared = after.backends.filter((b, i) => b === before.backends[i]).length;
    expect(shared).toBe(48);
    expect(after.frontends[0]).toBe(before.frontends[0]);
  });

  it('changes nothing it was given when an operation fails midway', () => {
    const before = many(3);
    const snapshot = structuredClone(before);
    const server = { name: 'srv1', address: '127.0.0.9', port: 1, check: true };
    expect(() =>
      apply(
        before,
        [
          { kind: 'update_server', backend: 'b1', server, changes: [] },
          { kind: 'delete_backend', name: 'missing' },
        ],
        registry,
      ),
    ).toThrow(ConcurrentChangeError);
    expect(before).toEqual(snapshot);
  });
});
