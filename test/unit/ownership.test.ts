import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config/env.js';
import type { RawState } from '../../src/haproxy/model.js';
import { DEFAULT_RENDER_OPTIONS, renderDesired } from '../../src/haproxy/render.js';
import { NotOwnedError } from '../../src/model/errors.js';
import type { Plan } from '../../src/plan/plan.js';
import { plan } from '../../src/plan/plan.js';
import { Reading } from '../../src/plan/reading.js';
import { MemoryProvider } from '../../src/providers/memory/memory-provider.js';
import { OwnedProvider, refuseForeign } from '../../src/registry/owned-provider.js';
import { DEFAULT_OWNER_ID, InvalidOwnerIdError, Registry } from '../../src/registry/registry.js';

const raw = (tags: Record<string, string>, serverTags: Record<string, string> = tags): RawState => ({
  frontends: [
    {
      name: 'kubebyon_sni',
      bind: { address: '*', port: 443 },
      inspectDelayMs: 5000,
      acceptsTlsHello: true,
      defaultBackend: null,
      rules: [
        { backend: 'kubebyon_demo_0123456789ab', host: 'a.example.com', tags },
        { backend: 'console', host: 'console.example.com', tags: {} },
      ],
      tags,
    },
  ],
  backends: [
    {
      name: 'kubebyon_demo_0123456789ab',
      balance: 'leastconn',
      servers: [{ name: 'srv1', address: '127.0.0.1', port: 1, check: true, tags: serverTags }],
      tags: { ...tags, cluster: 'demo' },
    },
  ],
});

const registry = new Registry();

describe('the registry', () => {
  it('owns exactly what carries our owner tag, and reads the cluster off owned backends', () => {
    const state = registry.interpret(raw(registry.tags()));
    expect(state.frontends[0]).toMatchObject({ owned: true });
    expect(state.frontends[0]?.rules.map((r) => r.owned)).toEqual([true, false]);
    expect(state.backends[0]).toMatchObject({ owned: true, cluster: 'demo' });
    expect(state.backends[0]?.servers[0]?.owned).toBe(true);
  });

  it('owns nothing that another owner, or no one, tagged — even under our names', () => {
    for (const tags of [{}, { owner: 'someone-else' }, { owner: DEFAULT_OWNER_ID.toUpperCase() }]) {
      const state = registry.interpret(raw(tags));
      expect(state.frontends[0]?.owned).toBe(false);
      expect(state.backends[0]).toMatchObject({ owned: false });
      expect(state.backends[0]?.cluster).toBeUndefined();
    }
  });

  it('owns a server without tags inside an owned backend (added at runtime, not yet in the files), not one another owner tagged', () => {
    expect(registry.interpret(raw(registry.tags(), {})).backends[0]?.servers[0]?.owned).toBe(true);
    const theirs = registry.interpret(raw(registry.tags(), { owner: 'someone-else' }));
    expect(theirs.backends[0]?.servers[0]?.owned).toBe(false);
    // In a foreign backend, even our tag does not make a server ours.
    expect(registry.interpret(raw({}, registry.tags())).backends[0]?.servers[0]?.owned).toBe(false);
  });

  it('keeps the tag value every earlier install wrote as the default owner id', () => {
    expect(DEFAULT_OWNER_ID).toBe('kubebyon-haproxy-adapter');
    expect(registry.tags('demo')).toEqual({ owner: 'kubebyon-haproxy-adapter', cluster: 'demo' });
    expect(registry.tags()).toEqual({ owner: 'kubebyon-haproxy-adapter' });
  });

  it("two owners on one HAProxy: each owns only its own objects, and never plans to delete the other's", () => {
    const staging = new Registry('staging');
    const production = new Registry('production');
    const both: RawState = {
      frontends: [
        { ...raw(staging.tags()).frontends[0], name: 'sni_staging' } as RawState['frontends'][number],
        { ...raw(production.tags()).frontends[0], name: 'sni_production' } as RawState['frontends'][number],
      ],
      backends: [
        { ...raw(staging.tags()).backends[0], name: 'stg_demo' } as RawState['backends'][number],
        { ...raw(production.tags()).backends[0], name: 'prd_demo' } as RawState['backends'][number],
      ],
    };
    const desired = renderDesired([], {
      ...DEFAULT_RENDER_OPTIONS,
      bind: { address: '*', port: 8443 },
      frontendName: 'sni_staging',
      namePrefix: 'stg',
      defaultBackend: null,
      inspectDelayMs: 5000,
      balance: 'leastconn',
      healthChecks: false,
      sniMap: 'x.sni.map',
      minSlots: 64,
    });
    const p = plan(desired, staging.interpret(both));
    // Staging's own leftovers go (its frontend of another name, its per-cluster backend); production's stay.
    const deleted = p.operations.flatMap((op) =>
      op.kind === 'delete_backend' || op.kind === 'delete_frontend' ? [op.name] : [],
    );
    expect(deleted).toEqual(['stg_demo']);
    expect(() => refuseForeign(p.operations, Reading.of(staging.interpret(both)), staging)).not.toThrow();
    expect(() => refuseForeign(p.operations, Reading.of(production.interpret(both)), production)).toThrow(
      NotOwnedError,
    );
  });

  it('refuses an owner id that could not be written safely into haproxy.cfg', () => {
    for (const bad of ['', 'Upper', 'a b', 'x#y', '-lead', 'trail-', 'a'.repeat(64), 'é', 'a\nb'])
      expect(() => new Registry(bad), bad).toThrow(InvalidOwnerIdError);
    for (const good of ['a', 'staging', 'prod-eu.1', 'a'.repeat(63)])
      expect(new Registry(good).id).toBe(good);
  });

  it('KUBEBYON_OWNER_ID is validated at start and names the variable', () => {
    const env = { KUBEBYON_WEBHOOK_SECRET: 's'.repeat(32), KUBEBYON_PROVIDER: 'haproxy' };
    expect(loadConfig({ ...env }).ownerId).toBe(DEFAULT_OWNER_ID);
    expect(loadConfig({ ...env, KUBEBYON_OWNER_ID: 'staging' }).ownerId).toBe('staging');
    expect(() => loadConfig({ ...env, KUBEBYON_OWNER_ID: 'x # y' })).toThrow(/KUBEBYON_OWNER_ID/);
  });
});

describe('OwnedProvider: ownership enforced before any provider', () => {
  const foreign = raw({ owner: 'someone-else' });
  const cases: Array<[string, Plan['operations']]> = [
    ['delete a foreign backend', [{ kind: 'delete_backend', name: 'kubebyon_demo_0123456789ab' }]],
    ['delete a foreign frontend', [{ kind: 'delete_frontend', name: 'kubebyon_sni' }]],
    [
      'create a backend under a foreign name',
      [
        {
          kind: 'create_backend',
          backend: { name: 'kubebyon_demo_0123456789ab', balance: 'leastconn' },
        },
      ],
    ],
    [
      'add a server to a foreign backend',
      [
        {
          kind: 'create_server',
          backend: 'kubebyon_demo_0123456789ab',
          server: { name: 'srv2', address: '127.0.0.1', port: 2, check: false },
        },
      ],
    ],
    [
      'set the rules of a foreign frontend',
      [{ kind: 'set_switching_rules', frontend: 'kubebyon_sni', rules: [], added: [], removed: [] }],
    ],
  ];
  for (const [what, operations] of cases) {
    it(`refuses to ${what}, and the provider sees nothing`, async () => {
      const inner = new MemoryProvider(structuredClone(foreign));
      const provider = new OwnedProvider(inner, registry);
      const current = await provider.read(AbortSignal.timeout(1000));
      await expect(
        provider.apply({ operations, conflicts: [] }, current, AbortSignal.timeout(1000)),
      ).rejects.toThrow(NotOwnedError);
      expect(inner.applies).toHaveLength(0);
      expect(inner.state).toEqual(foreign);
    });
  }

  it("refuses a change to another owner's server inside an owned backend", () => {
    const state = Reading.of(registry.interpret(raw(registry.tags(), { owner: 'someone-else' })));
    expect(() =>
      refuseForeign(
        [
          {
            kind: 'delete_server',
            backend: 'kubebyon_demo_0123456789ab',
            server: { name: 'srv1', address: '127.0.0.1', port: 1, check: true },
          },
        ],
        state,
        registry,
      ),
    ).toThrow(NotOwnedError);
  });
});
