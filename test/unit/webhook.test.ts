import { execFileSync, spawnSync } from 'node:child_process';
import { mkdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { TerminalError } from '../../src/model/errors.js';
import type { MemoryProvider } from '../../src/providers/memory/memory-provider.js';
import type { ClusterStore } from '../../src/store/cluster-store.js';
import { sign } from '../../src/webhook/auth.js';
import type { Readiness } from '../../src/webhook/readiness.js';
import { routedHosts } from '../support/owner.js';
import { TEST_SECRET as SECRET, startWebhookApp, type WebhookApp } from '../support/webhook-app.js';
import type { SignedClient } from '../support/webhook-client.js';

const body = (host: string, extra: Record<string, unknown> = { node_port: 30443 }) => ({
  control_plane_host: host,
  public_access_mode: 'loadbalancer',
  ...extra,
});

describe('webhook API', () => {
  let app: WebhookApp;
  let store: ClusterStore;
  let provider: MemoryProvider;
  let base: string;
  let client: SignedClient;
  // Every log line the app writes, parsed: tests check levels and that no stack reaches the log.
  // biome-ignore lint/suspicious/noExplicitAny: log lines are plain JSON
  let logLines: any[];
  const setReadiness = (r: () => Promise<Readiness>) => {
    app.readiness = r;
  };

  beforeEach(async () => {
    app = await startWebhookApp();
    ({ store, provider, base, client, logLines } = app);
  });

  afterEach(async () => {
    await app.stop();
  });

  it('stores a signed upsert, answers 202 at once, and reports it applied once reconciled', async () => {
    const res = await client.request('PUT', '/v1/clusters/demo', body('API.Demo.Example.com'));
    expect(res).toMatchObject({
      status: 202,
      body: { name: 'demo', host: 'api.demo.example.com', state: 'pending' },
    });
    expect(store.get('demo')).toMatchObject({ host: 'api.demo.example.com', target: { nodePort: 30443 } });
    const waited = await client.request('POST', '/v1/reconcile?wait=true');
    expect(waited.status).toBe(200);
    const got = await client.request('GET', '/v1/clusters/demo');
    expect(got.body).toMatchObject({ state: 'applied', api_endpoint: 'https://api.demo.example.com:443' });
    expect(got.body.last_applied_at).toMatch(/^\d{4}-\d\d-\d\dT/);
    expect(provider.state.backends[0]?.servers).toEqual([
      expect.objectContaining({ address: '10.0.0.1', port: 30443 }),
    ]);
  });

  it('with wait=true answers once the change is applied', async () => {
    const res = await client.request('PUT', '/v1/clusters/demo?wait=true', body('api.demo.example.com'));
    expect(res).toMatchObject({ status: 200, body: { state: 'applied' } });
  });

  it('with wait=true answers 409 with the reason when the claim on the host is refused', async () => {
    await client.request('PUT', '/v1/clusters/first?wait=true', body('api.example.com'));
    const res = await client.request('PUT', '/v1/clusters/second?wait=true', body('API.example.com'));
    expect(res.status).toBe(409);
    expect(res.body).toMatchObject({ name: 'second', state: 'rejected' });
    expect(res.body.reason).toMatch(/^host_claimed_by_other_cluster: .*cluster first$/);
  });

  it('with wait=true answers 502 with the error when HAProxy refused the change', async () => {
    provider.failures.push(new TerminalError('validation error: haproxy -c failed'));
    const res = await client.request('PUT', '/v1/clusters/demo?wait=true', body('api.demo.example.com'));
    expect(res).toMatchObject({
      status: 502,
      body: { state: 'error', error: 'validation error: haproxy -c failed' },
    });
  });

  it('answers 503 and acknowledges nothing when the change cannot be stored', async () => {
    // Tests run as root, whom permissions do not stop: folders where the journal and the snapshot go fail
    // both ways of storing a change.
    for (const f of ['state.json.journal', 'state.json']) {
      rmSync(join(app.dir, f), { force: true });
      mkdirSync(join(app.dir, f));
    }
    const res = await client.request('PUT', '/v1/clusters/demo', body('api.demo.example.com'));
    expect(res.status).toBe(503);
    expect(res.body).toMatchObject({ error: 'state_unavailable' });
    expect(store.get('demo')).toBeUndefined();
    expect((await store.health()).ok).toBe(false);
  });

  it('refuses to preview a plan before the topology has been read', async () => {
    await app.stop();
    app = await startWebhookApp({
      topology: { synced: () => false, endpointsFor: () => ({ endpoints: [] }) },
    });
    ({ store, provider, base, client, logLines } = app);
    const res = await app.client.request('GET', '/v1/plan');
    expect(res).toMatchObject({ status: 503, body: { error: 'topology_not_synced' } });
    expect(provider.reads).toBe(0);
  });

  it.each([
    [
      'no signature',
      async () =>
        fetch(`${base}/v1/clusters/demo`, { method: 'PUT', body: JSON.stringify(body('a.example.com')) }),
      'missing_credentials',
    ],
    [
      'a wrong secret',
      async () => client.request('PUT', '/v1/clusters/demo', body('a.example.com'), { secret: 'wrong' }),
      'bad_credentials',
    ],
    [
      'an old timestamp',
      async () =>
        client.request('PUT', '/v1/clusters/demo', body('a.example.com'), {
          timestamp: Math.floor(Date.now() / 1000) - 301,
        }),
      'stale_timestamp',
    ],
  ])('refuses a call with %s with 401 and changes nothing', async (_what, send, reason) => {
    const res = await send();
    const status = 'status' in res ? res.status : 0;
    const payload = res instanceof Response ? await res.json() : res.body;
    expect(status).toBe(401);
    expect(payload).toEqual({ error: 'unauthorized', reason });
    expect(store.list()).toEqual([]);
  });

  it('accepts a call signed with openssl the way the README shows', async () => {
    const ts = String(Math.floor(Date.now() / 1000));
    const payload = JSON.stringify(body('api.demo.example.com'));
    const script = `printf '%s\\n%s\\n%s\\n%s' "$TS" PUT /v1/clusters/demo "$BODY" | openssl dgst -sha256 -hmac "$SECRET" -r | cut -d' ' -f1`;
    const sig = execFileSync('sh', ['-c', script], {
      env: { ...process.env, TS: ts, BODY: payload, SECRET },
      encoding: 'utf8',
    }).trim();
    const res = await fetch(`${base}/v1/clusters/demo`, {
      method: 'PUT',
      body: payload,
      headers: {
        'content-type': 'application/json',
        'x-kubebyon-timestamp': ts,
        'x-kubebyon-signature': `sha256=${sig}`,
      },
    });
    expect(res.status).toBe(202);
  });

  it('refuses a signature made for another path or verb, and a replayed write', async () => {
    const raw = Buffer.alloc(0);
    const ts = String(Math.floor(Date.now() / 1000));
    await client.request('PUT', '/v1/clusters/victim', body('v.example.com'));
    const forOther = sign(SECRET, ts, 'DELETE', '/v1/clusters/other', raw);
    const moved = await fetch(`${base}/v1/clusters/victim`, {
      method: 'DELETE',
      headers: { 'x-kubebyon-timestamp': ts, 'x-kubebyon-signature': forOther },
    });
    expect(moved.status).toBe(401);
    // A captured write replayed later would undo what came after it: refused.
    const signature = sign(SECRET, ts, 'DELETE', '/v1/clusters/victim', raw);
    const headers = { 'x-kubebyon-timestamp': ts, 'x-kubebyon-signature': signature };
    await client.request('PUT', '/v1/clusters/victim', body('v.example.com'));
    expect((await fetch(`${base}/v1/clusters/victim`, { method: 'DELETE', headers })).status).toBe(202);
    await client.request('PUT', '/v1/clusters/victim', body('v2.example.com'));
    const replay = await fetch(`${base}/v1/clusters/victim`, { method: 'DELETE', headers });
    expect(replay.status).toBe(401);
    expect(await replay.json()).toEqual({ error: 'unauthorized', reason: 'replayed' });
    expect(store.get('victim')?.host).toBe('v2.example.com');
    // Reads may repeat.
    const read = {
      'x-kubebyon-timestamp': ts,
      'x-kubebyon-signature': sign(SECRET, ts, 'GET', '/v1/clusters', raw),
    };
    expect((await fetch(`${base}/v1/clusters`, { headers: read })).status).toBe(200);
    expect((await fetch(`${base}/v1/clusters`, { headers: read })).status).toBe(200);
  });

  it.each<[unknown, number, string, string]>([
    [{ public_access_mode: 'loadbalancer', node_port: 30443 }, 400, 'control_plane_host', 'invalid_type'],
    [{ ...body('a.example.com'), extra: 1 }, 400, 'extra', 'unrecognized_keys'],
    [body('a.example.com', { node_port: 70000 }), 400, 'node_port', 'too_big'],
    [
      body('a.example.com', { service: { namespace: 'NS!', name: 'x', port: 443 } }),
      400,
      'service.namespace',
      'invalid_format',
    ],
    // A Kubernetes port name (IANA_SVC_NAME) holds a letter: "80" could never match a Service port.
    ...['80', '-http', 'http-', 'ht--tp', 'HTTPS'].map((port): [unknown, number, string, string] => [
      body('a.example.com', { service: { namespace: 'n', name: 'x', port } }),
      400,
      'service.port',
      'invalid_format',
    ]),
    [body('10.1.2.3'), 422, 'control_plane_host', 'host_is_ip_literal'],
    [body('[2001:db8::1]'), 422, 'control_plane_host', 'host_is_ip_literal'],
    [body('a.example.com\nbackend x'), 422, 'control_plane_host', 'host_invalid_characters'],
    [body('\u212Aube.example.com'), 422, 'control_plane_host', 'host_invalid_characters'],
    [body('127.0x'), 422, 'control_plane_host', 'host_is_ip_literal'],
    [body('a.example.com', {}), 422, 'service', 'target_missing'],
    [
      body('a.example.com', { node_port: 1, service: { namespace: 'n', name: 'x', port: 443 } }),
      422,
      'service',
      'target_ambiguous',
    ],
  ])('refuses %j with %s naming %s (%s) and changes nothing', async (payload, status, field, reason) => {
    await client.request('PUT', '/v1/clusters/keep', body('keep.example.com'));
    const res = await client.request('PUT', '/v1/clusters/keep', payload);
    expect(res.status).toBe(status);
    expect(res.body).toMatchObject({ error: 'invalid_request', field, reason });
    expect(store.get('keep')?.host).toBe('keep.example.com');
  });

  it.each(['https', 'h2c', 'web-8080', 'abcdefghijklmno'])('accepts the port name %s', async (port) => {
    const res = await client.request(
      'PUT',
      '/v1/clusters/named',
      body('named.example.com', { service: { namespace: 'n', name: 'x', port } }),
    );
    expect(res.status).toBe(202);
    expect(store.get('named')?.target).toEqual({ service: { namespace: 'n', name: 'x', port } });
  });

  it('refuses a bad cluster name, a body that is not JSON, and one over the size limit', async () => {
    expect(
      (await client.request('PUT', '/v1/clusters/bad%20name', body('a.example.com'))).body,
    ).toMatchObject({
      field: 'name',
      reason: 'cluster_name_invalid',
    });
    const ts = String(Math.floor(Date.now() / 1000));
    const raw = Buffer.from('{not json');
    const res = await fetch(`${base}/v1/clusters/x`, {
      method: 'PUT',
      body: raw,
      headers: {
        'x-kubebyon-timestamp': ts,
        'x-kubebyon-signature': sign(SECRET, ts, 'PUT', '/v1/clusters/x', raw),
      },
    });
    expect(res.status).toBe(400);
    const big = await client.request(
      'PUT',
      '/v1/clusters/x',
      body('a.example.com', { node_port: 1, pad: 'x'.repeat(70_000) }),
    );
    expect(big.status).toBe(413);
    expect(store.list()).toEqual([]);
  });

  it.each([
    ['PUT', '/v1/clusters/%'],
    ['PUT', '/v1/clusters/a%zz'],
    ['GET', '/v1/clusters/%E0%A4%A'],
    ['DELETE', '/v1/clusters/a%zz'],
  ])(
    'refuses %s %s (bad percent-encoding) with 400 on the name, without an error log',
    async (method, path) => {
      const res = await client.request(method, path, method === 'PUT' ? body('a.example.com') : undefined);
      expect(res.status).toBe(400);
      expect(res.body).toMatchObject({
        error: 'invalid_request',
        field: 'name',
        reason: 'bad_percent_encoding',
      });
      expect(logLines.filter((l) => l.level >= 50)).toEqual([]);
      expect(JSON.stringify(logLines)).not.toContain('"stack"');
      expect(store.list()).toEqual([]);
    },
  );

  it('removes the route of a cluster whose mode is no longer loadbalancer, and on DELETE', async () => {
    await client.request('PUT', '/v1/clusters/a?wait=true', body('a.example.com'));
    await client.request('PUT', '/v1/clusters/b?wait=true', body('b.example.com'));
    expect(routedHosts(provider.state)).toEqual(['a.example.com', 'b.example.com']);
    await client.request('PUT', '/v1/clusters/a?wait=true', {
      ...body('a.example.com'),
      public_access_mode: 'nodeport',
    });
    expect((await client.request('DELETE', '/v1/clusters/b?wait=true')).body).toEqual({
      name: 'b',
      deleted: true,
    });
    expect(routedHosts(provider.state)).toEqual([]);
    expect((await client.request('GET', '/v1/clusters/a')).status).toBe(404);
  });

  it('takes the full set as authoritative, and refuses the whole set when one item is bad', async () => {
    await client.request('PUT', '/v1/clusters/old', body('old.example.com'));
    const bad = await client.request('PUT', '/v1/clusters', {
      clusters: [
        { name: 'x', ...body('x.example.com') },
        { name: 'y', ...body('1.2.3.4') },
      ],
    });
    expect(bad).toMatchObject({
      status: 422,
      body: { field: 'clusters.1.control_plane_host', reason: 'host_is_ip_literal' },
    });
    expect(store.list().map((c) => c.name)).toEqual(['old']);
    const ok = await client.request('PUT', '/v1/clusters?wait=true', {
      clusters: [
        { name: 'x', ...body('x.example.com') },
        { name: 'z', ...body('z.example.com', { node_port: 31000 }) },
      ],
    });
    expect(ok).toMatchObject({ status: 200, body: { clusters: 2, removed: ['old'] } });
    const all = await client.request('GET', '/v1/clusters');
    expect(all.body.clusters.map((c: { name: string; state: string }) => [c.name, c.state])).toEqual([
      ['x', 'applied'],
      ['z', 'applied'],
    ]);
  });

  it('shows the plan without applying it', async () => {
    // Passes are held at the provider, so the plan is still to do when it is asked for.
    provider.gate = new Promise<void>(() => {});
    await client.request('PUT', '/v1/clusters/demo', body('api.demo.example.com'));
    const res = await client.request('GET', '/v1/plan');
    expect(res.status).toBe(200);
    expect(res.body.text).toContain(
      '+ map kubebyon-haproxy-adapter.sni.map: api.demo.example.com -> kubebyon_slot_00001',
    );
    expect(res.body.operations.length).toBeGreaterThan(0);
    expect(res.body.routes).toEqual([
      {
        cluster: 'demo',
        host: 'api.demo.example.com',
        backend: 'kubebyon_slot_00001',
        servers: expect.arrayContaining([expect.stringMatching(/:\d+$/)]),
      },
    ]);
    expect(provider.applies).toEqual([]);
  });

  it('serves health, readiness, the OpenAPI document and metrics without credentials', async () => {
    expect((await fetch(`${base}/healthz`)).status).toBe(200);
    expect((await fetch(`${base}/readyz`)).status).toBe(503);
    await client.request('POST', '/v1/reconcile?wait=true');
    expect((await fetch(`${base}/readyz`)).status).toBe(200);
    // biome-ignore lint/suspicious/noExplicitAny: the document is read as plain JSON
    const doc: any = await (await fetch(`${base}/openapi.json`)).json();
    expect(doc.openapi).toBe('3.1.0');
    expect(Object.keys(doc.paths)).toEqual([
      '/v1/clusters',
      '/v1/clusters/{name}',
      '/v1/plan',
      '/v1/reconcile',
      '/v1/readyz',
    ]);
    expect(
      doc.paths['/v1/clusters/{name}'].put.requestBody.content['application/json'].schema.required,
    ).toEqual(['control_plane_host', 'public_access_mode']);
  });

  it('gives readiness details (such as internal addresses) only to signed callers', async () => {
    setReadiness(async () => ({
      ready: false,
      checks: {
        state: { ok: true },
        haproxy: { ok: false, detail: 'connect ECONNREFUSED 10.9.8.7:5555' },
      },
    }));
    const open = await fetch(`${base}/readyz`);
    expect(open.status).toBe(503);
    expect(await open.json()).toEqual({
      ready: false,
      checks: { state: { ok: true }, haproxy: { ok: false } },
    });
    expect((await fetch(`${base}/v1/readyz`)).status).toBe(401);
    const signed = await client.request('GET', '/v1/readyz');
    expect(signed).toEqual({
      status: 503,
      body: {
        ready: false,
        checks: { state: { ok: true }, haproxy: { ok: false, detail: 'connect ECONNREFUSED 10.9.8.7:5555' } },
      },
    });
    setReadiness(async () => ({ ready: true, checks: { state: { ok: true }, haproxy: { ok: true } } }));
    expect((await client.request('GET', '/v1/readyz')).status).toBe(200);
    expect((await fetch(`${base}/readyz`)).status).toBe(200);
  });

  it('exposes metrics in valid Prometheus text format, with bounded labels', async () => {
    await client.request('PUT', '/v1/clusters/secret-cluster-name?wait=true', body('hidden.example.com'));
    await fetch(`${base}/v1/clusters`);
    const text = await (await fetch(`${base}/metrics`)).text();
    // promtool (Debian's prometheus package) parses and lints the exposition: exit 1 is a parse error, 3 lint
    // findings. The only findings allowed are prom-client's own gauges named *_total; ours must lint clean.
    const check = spawnSync('promtool', ['check', 'metrics'], { input: text, encoding: 'utf8' });
    expect(check.error).toBeUndefined();
    expect([0, 3]).toContain(check.status);
    const findings = `${check.stdout}${check.stderr}`.split('\n').filter(Boolean);
    expect(
      findings.filter((f) => !/^nodejs_active_(handles|requests|resources)_total non-counter/.test(f)),
    ).toEqual([]);
    expect(text).toMatch(
      /^kubebyon_haproxy_adapter_webhook_requests_total\{method="PUT",route="\/v1\/clusters\/:name",status="200"\} 1$/m,
    );
    expect(text).toMatch(
      /^kubebyon_haproxy_adapter_webhook_requests_total\{method="GET",route="unmatched",status="401"\} 1$/m,
    );
    expect(text).toMatch(/^kubebyon_haproxy_adapter_routes\{state="applied"\} 1$/m);
    expect(text).toMatch(/^kubebyon_haproxy_adapter_reconciles_total\{result="changed"\} 1$/m);
    expect(text).toMatch(/^process_resident_memory_bytes \d+/m);
    // Cluster names and hosts only in the one info metric that maps clusters to backends (a series each).
    const naming = text.split('\n').filter((l) => /secret-cluster-name|hidden\.example\.com/.test(l));
    expect(naming).toEqual([
      expect.stringMatching(
        /^kubebyon_haproxy_adapter_route_backend_info\{cluster="secret-cluster-name",host="hidden\.example\.com",backend="[\w.-]+"\} 1$/,
      ),
    ]);
  });
});
