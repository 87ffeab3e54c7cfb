import { createHash } from 'node:crypto';
import type { RawBackend, RawFrontend, RawState, Tagger } from '../../src/haproxy/model.js';
import type { Route } from '../../src/routes/route.js';

/**
 * What releases before map routing wrote with `KUBEBYON_HAPROXY_ROUTING=rules`, for upgrade tests: one
 * backend per cluster, named as they named it, and one `use_backend <backend> if { req.ssl_sni -i <host> }`
 * rule per cluster in the SNI frontend, every object tagged by the owner (backends with their cluster).
 */
export function legacyBackendName(cluster: string, prefix = 'kubebyon_'): string {
  const slug = cluster
    .toLowerCase()
    .replace(/[^a-z0-9]/g, '-')
    .slice(0, 32);
  const hash = createHash('sha256').update(cluster, 'utf8').digest('hex').slice(0, 12);
  return `${prefix}${slug}_${hash}`;
}

/** The state an old `rules` install left for `routes` (sorted by host, as it rendered them). */
export function legacyRulesState(
  routes: readonly Route[],
  owner: Tagger,
  frontend: Partial<RawFrontend> = {},
  check = true,
): RawState {
  const sorted = [...routes].sort((a, b) => (a.host < b.host ? -1 : a.host > b.host ? 1 : 0));
  const backends: RawBackend[] = sorted.map((r) => ({
    name: legacyBackendName(r.cluster),
    balance: 'leastconn',
    servers: r.endpoints.map((e, i) => ({
      name: `srv${i + 1}`,
      address: e.address,
      port: e.port,
      check,
      tags: owner.tags(),
    })),
    tags: owner.tags(r.cluster),
  }));
  return {
    frontends: [
      {
        name: 'kubebyon_sni',
        bind: { address: '*', port: 443 },
        inspectDelayMs: 5000,
        acceptsTlsHello: true,
        defaultBackend: null,
        rules: sorted.map((r) => ({
          backend: legacyBackendName(r.cluster),
          host: r.host,
          tags: owner.tags(),
        })),
        tags: owner.tags(),
        ...frontend,
      },
    ],
    backends,
  };
}
