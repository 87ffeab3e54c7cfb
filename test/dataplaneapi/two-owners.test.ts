import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DPAPI_USER } from '../support/dataplaneapi-testbed.js';
import { freeLoopbackPort } from '../support/ports.js';
import { type ServiceProcess, startServiceProcess } from '../support/service-process.js';
import { sniProbe } from '../support/tls.js';
import { waitFor } from '../support/wait.js';
import { type Harness, rawConfig, sections, source, startHarness, versionUnderTest } from './harness.js';

const SECRET = 'a-long-enough-test-secret';

// Two adapters on one Data Plane API, as a staging and a production KubeBYON behind one public IP. Before
// owner ids both wrote the same owner tag, and each deleted the other's frontend and backends on every pass.
describe.skipIf(!source)(`two owners on one Data Plane API, HAProxy ${versionUnderTest()}`, () => {
  let h: Harness;
  let dir: string;
  let stagingPort: number;
  const services: ServiceProcess[] = [];
  const start = (name: string, extra: Record<string, string>) =>
    startServiceProcess(
      {
        KUBEBYON_PROVIDER: 'dataplaneapi',
        KUBEBYON_DATAPLANE_URL: h.tb.url,
        KUBEBYON_DATAPLANE_USERNAME: DPAPI_USER,
        KUBEBYON_DATAPLANE_PASSWORD: h.tb.password,
        KUBEBYON_DATAPLANE_RELOAD_TIMEOUT_MS: '10000',
        // Each its own folder: the state file and the open-transaction ledger beside it.
        KUBEBYON_STATE_FILE: join(dir, name, 'clusters.json'),
        KUBEBYON_STATIC_NODE_ADDRESSES: '127.0.0.1',
        KUBEBYON_RECONCILE_DEBOUNCE_MS: '20',
        KUBEBYON_RESYNC_INTERVAL_MS: '500',
        KUBEBYON_LOG_LEVEL: 'warn',
        ...extra,
      },
      SECRET,
      { until: 'readyz', startTimeoutMs: 60_000 },
    );
  const passes = async (service: ServiceProcess) => {
    const text = await (await fetch(`${service.url}/metrics`)).text();
    let n = 0;
    for (const m of text.matchAll(/kubebyon_haproxy_adapter_reconciles_total\{[^}]*\} (\d+)/g))
      n += Number(m[1]);
    return n;
  };

  beforeAll(async () => {
    h = await startHarness();
    dir = mkdtempSync(join(tmpdir(), 'kubebyon-two-owners-'));
    stagingPort = await freeLoopbackPort();
  }, 120_000);
  afterAll(async () => {
    for (const s of services) await s.stop();
    await h?.close();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('each registers a cluster; through several resyncs both answer by SNI and neither touches the other', async () => {
    const production = await start('production', {
      KUBEBYON_OWNER_ID: 'production',
      KUBEBYON_HAPROXY_BIND_ADDR: `127.0.0.1:${h.sniPort}`,
      KUBEBYON_PUBLIC_PORT: String(h.sniPort),
    });
    services.push(production);
    const staging = await start('staging', {
      KUBEBYON_OWNER_ID: 'staging',
      KUBEBYON_HAPROXY_FRONTEND_NAME: 'staging_sni',
      KUBEBYON_HAPROXY_NAME_PREFIX: 'stg_',
      KUBEBYON_HAPROXY_BIND_ADDR: `127.0.0.1:${stagingPort}`,
      KUBEBYON_PUBLIC_PORT: String(stagingPort),
    });
    services.push(staging);
    const cluster = (host: string, port: number) => ({
      control_plane_host: host,
      public_access_mode: 'loadbalancer',
      node_port: port,
    });
    const p = await production.client.request(
      'PUT',
      '/v1/clusters/demo?wait=true',
      cluster('alpha.example.com', h.alpha.port),
    );
    expect(p.status, JSON.stringify(p.body)).toBe(200);
    const s = await staging.client.request(
      'PUT',
      '/v1/clusters/demo?wait=true',
      cluster('beta.example.com', h.beta.port),
    );
    expect(s.status, JSON.stringify(s.body)).toBe(200);

    // Map routing: the servers added at runtime reach the configuration soon after; then it holds still.
    await waitFor(
      async () => {
        const text = await rawConfig(h.tb);
        return text.includes(`:${h.alpha.port}`) && text.includes(`:${h.beta.port}`);
      },
      10_000,
      'both servers written to the configuration',
    );
    const before = sections(await rawConfig(h.tb));
    const ours = (owner: string) =>
      [...before.entries()].filter(([, text]) => text.includes(owner)).map(([key]) => key);
    // Each owner's frontend, its refusals table (the guard) and its own slot pool, and nothing of the other's.
    const prodSections = ours('production');
    const stgSections = ours('staging');
    expect(prodSections).toContain('frontend kubebyon_sni');
    expect(
      prodSections.every((k) => /^(frontend kubebyon_sni|backend kubebyon_(slot_\d+|refusals))$/.test(k)),
    ).toBe(true);
    expect(stgSections).toContain('frontend staging_sni');
    expect(stgSections.every((k) => /^(frontend staging_sni|backend stg_(slot_\d+|refusals))$/.test(k))).toBe(
      true,
    );

    const [p0, s0] = [await passes(production), await passes(staging)];
    await waitFor(
      async () => (await passes(production)) >= p0 + 3 && (await passes(staging)) >= s0 + 3,
      30_000,
      'three resyncs of each adapter',
    );
    expect(await sniProbe(h.sniPort, 'alpha.example.com')).toEqual({ reached: 'alpha' });
    expect(await sniProbe(stagingPort, 'beta.example.com')).toEqual({ reached: 'beta' });
    // Each host on its own adapter's frontend only.
    expect(await sniProbe(stagingPort, 'alpha.example.com')).not.toHaveProperty('reached');
    // The resyncs wrote nothing: every section is as it was, and each plan is empty.
    expect(sections(await rawConfig(h.tb))).toEqual(before);
    for (const service of [production, staging]) {
      const plan = await service.client.request('GET', '/v1/plan');
      expect(plan.body).toMatchObject({ operations: [], conflicts: [] });
    }
  }, 180_000);
});
