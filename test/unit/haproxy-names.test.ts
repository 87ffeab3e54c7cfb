import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config/env.js';
import { isHaproxyName, PREFIX_MAX, slotName, slotPrefixFor } from '../../src/naming/names.js';
import { checkedName } from '../../src/providers/dataplaneapi/checked.js';
import { renderOwnedFile } from '../../src/providers/haproxy/owned-file.js';
import { ownerTags } from '../support/owner.js';
import { PROPERTY_TIMEOUT_MS } from '../support/property.js';

const secret = { KUBEBYON_WEBHOOK_SECRET: 'a-long-enough-secret', KUBEBYON_DATAPLANE_PASSWORD: 'pw' };

// Whether each part of the service takes `name` as a frontend's name.
function verdicts(name: string) {
  const accepts = (f: () => unknown) => {
    try {
      f();
      return true;
    } catch {
      return false;
    }
  };
  const frontend = {
    name,
    bind: { address: '*', port: 443 },
    inspectDelayMs: 5000,
    acceptsTlsHello: true,
    defaultBackend: null,
    rules: [],
    tags: ownerTags(),
  };
  return {
    config: accepts(() => loadConfig({ ...secret, KUBEBYON_HAPROXY_FRONTEND_NAME: name })),
    dataplaneapi: accepts(() => checkedName(name, 'frontend')),
    ownedFile: accepts(() => renderOwnedFile({ frontends: [frontend], backends: [] })),
  };
}

describe('HAProxy names', () => {
  it('are judged alike by the configuration and by both providers’ writers', () => {
    const names = [
      'kubebyon_sni',
      'a:b.c-d_E9',
      'x'.repeat(100),
      'x'.repeat(127),
      'x'.repeat(128),
      'x y',
      'fe}',
    ];
    for (const name of names) {
      const v = verdicts(name);
      expect(v, name).toEqual({ config: isHaproxyName(name), dataplaneapi: v.config, ownedFile: v.config });
    }
    expect(verdicts('x'.repeat(127)).config).toBe(true);
    expect(verdicts('x'.repeat(128)).config).toBe(false);
  });

  it('given to slots fit every writer, with the longest prefix allowed', {
    timeout: PROPERTY_TIMEOUT_MS,
  }, () => {
    const prefix = `p${'_'.repeat(PREFIX_MAX - 1)}`;
    expect(loadConfig({ ...secret, KUBEBYON_HAPROXY_NAME_PREFIX: prefix }).haproxy.namePrefix).toBe(prefix);
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 10_000_000 }), (n) => {
        const name = slotName(slotPrefixFor(prefix), n);
        expect(isHaproxyName(name)).toBe(true);
        expect(checkedName(name, 'backend')).toBe(name);
      }),
    );
  });
});
