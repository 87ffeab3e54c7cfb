import { describe, expect, it } from 'vitest';
import type { RawState } from '../../src/haproxy/model.js';
import { interpret, isOwned, OWNER, ownerTags } from '../../src/registry/ownership.js';

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
      tags: { ...tags, ...(isOwned(tags) ? { cluster: 'demo' } : {}) },
    },
  ],
});

describe('ownership registry', () => {
  it('owns exactly what carries our owner tag, and reads the cluster off owned backends', () => {
    const state = interpret(raw(ownerTags()));
    expect(state.frontends[0]).toMatchObject({ owned: true });
    expect(state.frontends[0]?.rules.map((r) => r.owned)).toEqual([true, false]);
    expect(state.backends[0]).toMatchObject({ owned: true, cluster: 'demo' });
    expect(state.backends[0]?.servers[0]?.owned).toBe(true);
  });

  it('owns nothing that another owner, or no one, tagged — even under our names', () => {
    for (const tags of [{}, { owner: 'someone-else' }, { owner: OWNER.toUpperCase() }]) {
      const state = interpret(raw(tags));
      expect(state.frontends[0]?.owned).toBe(false);
      expect(state.backends[0]).toMatchObject({ owned: false });
      expect(state.backends[0]?.cluster).toBeUndefined();
    }
  });

  it('does not own a hand-added server inside an owned backend', () => {
    const state = interpret(raw(ownerTags(), {}));
    expect(state.backends[0]?.servers[0]?.owned).toBe(false);
  });

  it('tags backends with their cluster and everything else with the owner only', () => {
    expect(ownerTags('demo')).toEqual({ owner: OWNER, cluster: 'demo' });
    expect(ownerTags()).toEqual({ owner: OWNER });
  });
});
