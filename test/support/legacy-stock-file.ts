import type { Bind, RawBackend, RawState, Tagger } from '../../src/haproxy/model.js';
import { defaultsNameFor, renderOwnedFile } from '../../src/providers/haproxy/owned-file.js';
import { compareStrings } from '../../src/routes/route.js';
import { legacyBackendName } from './legacy-rules.js';

/**
 * The owned file the stock-HAProxy provider of the releases before map routing wrote with
 * `KUBEBYON_HAPROXY_ROUTING=rules`, for upgrade tests: one backend per cluster, `<prefix><slug>_<hash>`,
 * and one `use_backend <backend> if { req.ssl_sni -i <host> }` rule per cluster in the SNI frontend, every
 * object tagged by the owner (backends with their cluster). The file's renderer has not changed since; what
 * the old planner made of the routes is rebuilt here, and test/fixtures/legacy-rules/*.cfg hold the bytes
 * the release itself (a653034: its render, plan, applyOperations and renderOwnedFile, first pass on an
 * HAProxy running only the operator's proxies) wrote for `LEGACY_FIXTURE_ROUTES`, which
 * test/integration/stock-map-routing.test.ts compares this with.
 */

export interface LegacyRoute {
  cluster: string;
  host: string;
  endpoints: ReadonlyArray<{ address: string; port: number }>;
}

export interface LegacyOptions {
  owner: Tagger;
  bind: Bind;
  healthChecks: boolean;
  frontendName?: string;
  inspectDelayMs?: number;
  /** The owned file's folder (where a map file would be: none in this layout). */
  mapDir: string;
}

/** What an old `rules` install held in its owned file for `routes` (valid ones, as the old planner took them). */
export function legacyRulesFileState(routes: readonly LegacyRoute[], o: LegacyOptions): RawState {
  const sorted = [...routes].sort((x, y) => compareStrings(x.host, y.host));
  const backends: RawBackend[] = sorted.map((r) => ({
    name: legacyBackendName(r.cluster),
    balance: 'leastconn',
    servers: r.endpoints.map((e, i) => ({
      name: `srv${i + 1}`,
      address: e.address,
      port: e.port,
      check: o.healthChecks,
      tags: o.owner.tags(),
    })),
    tags: o.owner.tags(r.cluster),
  }));
  return {
    frontends: [
      {
        name: o.frontendName ?? 'kubebyon_sni',
        bind: o.bind,
        inspectDelayMs: o.inspectDelayMs ?? 5000,
        acceptsTlsHello: true,
        defaultBackend: null,
        rules: sorted.map((r) => ({
          backend: legacyBackendName(r.cluster),
          host: r.host,
          tags: o.owner.tags(),
        })),
        tags: o.owner.tags(),
      },
    ],
    backends,
  };
}

/** The owned file's text an old `rules` install left for `routes`. */
export function legacyRulesFile(routes: readonly LegacyRoute[], o: LegacyOptions): string {
  return renderOwnedFile(legacyRulesFileState(routes, o), defaultsNameFor(o.owner.id), o.mapDir);
}

/** The routes test/fixtures/legacy-rules/*.cfg were written for (bind 127.0.0.1:4443, map folder /etc/kubebyon). */
export const LEGACY_FIXTURE_ROUTES: readonly LegacyRoute[] = [
  {
    cluster: 'Team-A.prod',
    host: 'api.prod.team-a.example.com',
    endpoints: [
      { address: '10.0.0.1', port: 30443 },
      { address: '10.0.0.2', port: 30443 },
    ],
  },
  {
    cluster: 'Beta_Cluster.1',
    host: 'k8s.beta.example.org',
    endpoints: [{ address: '127.0.0.1', port: 31001 }],
  },
  { cluster: 'c3', host: 'api.c3.example.com', endpoints: [] },
];
