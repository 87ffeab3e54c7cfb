import { describe, expect, it } from 'vitest';
import { DEFAULT_RENDER_OPTIONS } from '../../src/haproxy/render.js';
import { applyOperations } from '../../src/plan/apply.js';
import { plan } from '../../src/plan/plan.js';
import { readConfigText } from '../../src/providers/dataplaneapi/config-text.js';
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

// The same cluster in the Data Plane API's file as the previous release wrote it through transactions: tags
// in a JSON comment on each line (v3.2+), or in a description (v3.0).
const META = (extra = '') => `# {${extra}"owner":{"value":"kubebyon-haproxy-adapter"}}`;
const API_WRITTEN = {
  metadata: `# _version=7
global
  stats socket /run/haproxy.sock level admin

frontend kubebyon_sni ${META()}
  mode tcp
  bind *:443 name kubebyon ${META()}
  tcp-request inspect-delay 5000
  tcp-request content accept if { req.ssl_hello_type 1 } ${META()}
  use_backend kubebyon_demo_2a97516c354b if { req.ssl_sni -i api.demo.example.com } ${META()}

backend kubebyon_demo_2a97516c354b ${META('"cluster":{"value":"demo"},')}
  mode tcp
  balance leastconn
  server srv1 127.0.0.1:30443 ${META()}
`,
  description: `# _version=7
frontend kubebyon_sni
  description kubebyon owner=kubebyon-haproxy-adapter
  mode tcp
  bind *:443 name kubebyon
  tcp-request inspect-delay 5s
  tcp-request content accept if { req_ssl_hello_type 1 }
  use_backend kubebyon_demo_2a97516c354b if { req.ssl_sni -i api.demo.example.com }

backend kubebyon_demo_2a97516c354b
  description kubebyon owner=kubebyon-haproxy-adapter cluster=demo
  mode tcp
  balance leastconn
  server srv1 127.0.0.1:30443 ${META()}
`,
};

describe('an install upgraded from before owner ids and map routing', () => {
  const registry = new Registry(DEFAULT_OWNER_ID);
  const { config } = desiredConfig([demo], new StaticTopology(['127.0.0.1']), {
    ...DEFAULT_RENDER_OPTIONS,
    healthChecks: false,
  });

  it('stock HAProxy: reads its old file as its own, and moves it to the map in one plan, written back as the new layout', () => {
    const { state } = parseOwnedFile(WRITTEN_BEFORE_OWNER_IDS, defaultsNameFor(registry.id));
    const view = registry.interpret(state);
    expect(view.frontends.every((f) => f.owned)).toBe(true);
    expect(view.backends).toEqual([expect.objectContaining({ owned: true, cluster: 'demo' })]);
    const p = plan(config, view);
    const after = applyOperations(view, p.operations, registry).state;
    expect(after.maps?.[0]?.entries.get('api.demo.example.com')).toBe('kubebyon_slot_00001');
    expect(after.backends.some((b) => b.name === 'kubebyon_demo_2a97516c354b')).toBe(false);
    // The file the stock provider writes for it reads back as the same objects, all ours, nothing more to do.
    const text = renderOwnedFile(after, defaultsNameFor(registry.id), '/etc/haproxy');
    const again = registry.interpret(
      parseOwnedFile(text, defaultsNameFor(registry.id), '/etc/haproxy').state,
    );
    expect(again.frontends[0]?.rules).toEqual([]);
    expect(plan(config, { ...again, maps: after.maps ?? [] }).operations).toEqual([]);
  });

  for (const [form, text] of Object.entries(API_WRITTEN))
    it(`Data Plane API (${form}): reads what the old release wrote as its own, and plans the move to the map`, () => {
      const raw = readConfigText(text, (file) => file, 'kubebyon-haproxy-adapter.allow.map');
      const view = registry.interpret(raw);
      expect(view.frontends).toEqual([
        expect.objectContaining({
          owned: true,
          bind: { address: '*', port: 443 },
          inspectDelayMs: 5000,
          acceptsTlsHello: true,
        }),
      ]);
      expect(view.frontends[0]?.rules).toEqual([
        expect.objectContaining({
          backend: 'kubebyon_demo_2a97516c354b',
          host: 'api.demo.example.com',
          owned: true,
        }),
      ]);
      expect(view.backends).toEqual([expect.objectContaining({ owned: true, cluster: 'demo' })]);
      const p = plan(config, view);
      expect(p.conflicts).toEqual([]);
      expect(p.operations.map((o) => o.kind)).toContain('delete_backend');
      // Another owner id sees the same objects as foreign: a conflict, never a change.
      const other = plan(config, new Registry('staging').interpret(raw));
      expect(other.operations).toEqual([]);
      expect(other.conflicts.map((c) => c.kind)).toEqual(['frontend_not_owned']);
    });
});
