import { describe, expect, it } from 'vitest';
import { DEFAULT_RENDER_OPTIONS } from '../../src/haproxy/render.js';
import { plan } from '../../src/plan/plan.js';
import { readState } from '../../src/providers/dataplaneapi/mapping.js';
import { defaultsNameFor, renderOwnedFile } from '../../src/providers/haproxy/owned-file.js';
import { parseOwnedFile } from '../../src/providers/haproxy/owned-file-parse.js';
import { desiredConfig } from '../../src/reconcile/pass.js';
import { DEFAULT_OWNER_ID, Registry } from '../../src/registry/registry.js';
import { StaticTopology } from '../../src/topology/topology.js';

// The owned file exactly as the previous release (owner a constant) wrote it for one cluster, `demo`.
const WRITTEN_BEFORE_OWNER_IDS = `# Managed by kubebyon-haproxy-adapter: every change replaces this whole file, so edits here are lost.
# HAProxy loads it with -f after the operator-owned files.

defaults kubebyon_adapter
  mode tcp
  log global
  option tcplog
  timeout connect 5s
  timeout client 30s
  timeout server 30s
  timeout tunnel 4h
  timeout client-fin 30s
  timeout server-fin 30s

frontend kubebyon_sni from kubebyon_adapter # kubebyon owner=kubebyon-haproxy-adapter
  id 1727110335
  mode tcp
  bind *:443
  tcp-request inspect-delay 5000ms
  tcp-request content accept if { req.ssl_hello_type 1 }
  use_backend kubebyon_demo_2a97516c354b if { req.ssl_sni -i api.demo.example.com } # kubebyon owner=kubebyon-haproxy-adapter

backend kubebyon_demo_2a97516c354b from kubebyon_adapter # kubebyon owner=kubebyon-haproxy-adapter cluster=demo
  mode tcp
  balance leastconn
  server srv1 127.0.0.1:30443 # kubebyon owner=kubebyon-haproxy-adapter
`;

const demo = {
  name: 'demo',
  host: 'api.demo.example.com',
  target: { nodePort: 30443 },
  claimedAt: 1,
  updatedAt: 1,
};

describe('an install upgraded from before owner ids', () => {
  const registry = new Registry(DEFAULT_OWNER_ID);
  const { config } = desiredConfig([demo], new StaticTopology(['127.0.0.1']), {
    ...{ ...DEFAULT_RENDER_OPTIONS, routing: 'rules' as const },
    healthChecks: false,
  });

  it('stock HAProxy: reads its old file as its own, plans nothing, and writes it back byte for byte', () => {
    const { state } = parseOwnedFile(WRITTEN_BEFORE_OWNER_IDS, defaultsNameFor(registry.id));
    const view = registry.interpret(state);
    expect(view.frontends.every((f) => f.owned)).toBe(true);
    expect(view.backends).toEqual([expect.objectContaining({ owned: true, cluster: 'demo' })]);
    expect(plan(config, view).operations).toEqual([]);
    expect(renderOwnedFile(state, defaultsNameFor(registry.id))).toBe(WRITTEN_BEFORE_OWNER_IDS);
  });

  it('Data Plane API: reads the metadata the old release wrote as its own, and plans nothing', () => {
    const meta = (extra: Record<string, { value: string }> = {}) => ({
      owner: { value: 'kubebyon-haproxy-adapter' },
      ...extra,
    });
    const raw = readState(
      {
        version: 7,
        frontends: [
          {
            name: 'kubebyon_sni',
            mode: 'tcp',
            metadata: meta(),
            binds: { kubebyon: { name: 'kubebyon', address: '*', port: 443, metadata: meta() } },
            tcp_request_rule_list: [
              { type: 'inspect-delay', timeout: 5000, metadata: meta() },
              {
                type: 'content',
                action: 'accept',
                cond: 'if',
                cond_test: '{ req.ssl_hello_type 1 }',
                metadata: meta(),
              },
            ],
            backend_switching_rule_list: [
              {
                name: 'kubebyon_demo_2a97516c354b',
                cond: 'if',
                cond_test: '{ req.ssl_sni -i api.demo.example.com }',
                metadata: meta(),
              },
            ],
          },
        ],
        backends: [
          {
            name: 'kubebyon_demo_2a97516c354b',
            mode: 'tcp',
            balance: { algorithm: 'leastconn' },
            metadata: meta({ cluster: { value: 'demo' } }),
            servers: { srv1: { name: 'srv1', address: '127.0.0.1', port: 30443, metadata: meta() } },
          },
        ],
      },
      registry,
      { ownership: 'metadata', serverTags: true },
    );
    const view = registry.interpret(raw);
    expect(view.backends).toEqual([expect.objectContaining({ owned: true, cluster: 'demo' })]);
    expect(plan(config, view).operations).toEqual([]);
    // Another owner id sees the same objects as foreign: a conflict, never a change.
    const other = plan(config, new Registry('staging').interpret(raw));
    expect(other.operations).toEqual([]);
    expect(other.conflicts.map((c) => c.kind)).toEqual(['frontend_not_owned']);
  });
});
