import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig, renderOptionsOf } from '../../src/config/env.js';
import { DEFAULT_RENDER_OPTIONS } from '../../src/haproxy/render.js';

const secret = { KUBEBYON_WEBHOOK_SECRET: 'a-long-enough-secret', KUBEBYON_DATAPLANE_PASSWORD: 'pw' };

describe('loadConfig', () => {
  it('applies the documented defaults', () => {
    const c = loadConfig(secret);
    expect(c.haproxy).toEqual({
      bind: { address: '*', port: 443 },
      frontendName: 'kubebyon_sni',
      namePrefix: 'kubebyon_',
      defaultBackend: null,
      inspectDelayMs: 5000,
      balance: 'leastconn',
      healthChecks: true,
      sniMap: 'kubebyon-haproxy-adapter.sni.map',
      allowMap: 'kubebyon-haproxy-adapter.allow.map',
      minSlots: 64,
      maxConn: 8000,
      perSource: { maxConn: 500, maxRate: 1000, tableSize: 100000 },
      nodeAddressType: 'internal',
    });
    expect(c.persistDelayMs).toBe(500);
    expect(c.listen).toEqual({ host: '0.0.0.0', port: 8080 });
    expect(c.reconcile).toEqual({
      debounceMs: 0,
      maxDelayMs: 2000,
      resyncIntervalMs: 60000,
      retries: 5,
      watchMs: 500,
    });
    expect(c.webhook).toMatchObject({
      auth: 'hmac',
      secret: 'a-long-enough-secret',
      replayWindowSeconds: 300,
    });
  });

  it('starts an install that still sets a retired setting as before, with one warning naming it, whatever its value', () => {
    const retired = {
      KUBEBYON_HAPROXY_ROUTING: 'rules',
      KUBEBYON_DATAPLANE_COMMIT: 'follow',
      KUBEBYON_RECONCILE_DEBOUNCE_MS: 'not-a-number',
      KUBEBYON_HAPROXY_WATCH_MS: '10',
    };
    const c = loadConfig({ ...secret, ...retired });
    expect(c.warnings.map((w) => w.split(' ')[0]).sort()).toEqual(Object.keys(retired).sort());
    expect(c.warnings[0]).toMatch(/is no longer read and is ignored: /);
    expect(c.reconcile).toEqual(loadConfig(secret).reconcile);
    expect(loadConfig(secret).warnings).toEqual([]);
  });

  it('reads the runbook variables and a secret from a file', () => {
    const dir = mkdtempSync(join(tmpdir(), 'kubebyon-env-'));
    try {
      writeFileSync(join(dir, 'secret'), 'from-a-mounted-secret-file\n');
      const c = loadConfig({
        KUBEBYON_WEBHOOK_SECRET_FILE: join(dir, 'secret'),
        KUBEBYON_DATAPLANE_PASSWORD: 'pw',
        KUBEBYON_HAPROXY_BIND_ADDR: '0.0.0.0:8443',
        KUBEBYON_HAPROXY_NODE_ADDRESS_TYPE: 'external',
        KUBEBYON_STATIC_NODE_ADDRESSES: '10.0.0.1, fd00::1',
        KUBEBYON_HAPROXY_DEFAULT_BACKEND: 'console_https',
      });
      expect(c.webhook.secret).toBe('from-a-mounted-secret-file');
      expect(c.haproxy.bind).toEqual({ address: '0.0.0.0', port: 8443 });
      expect(c.haproxy.nodeAddressType).toBe('external');
      expect(c.haproxy.defaultBackend).toBe('console_https');
      expect(c.topology.nodeAddresses).toEqual(['10.0.0.1', 'fd00::1']);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('names every bad variable at once', () => {
    let error: unknown;
    try {
      loadConfig({
        KUBEBYON_HAPROXY_BIND_ADDR: '443',
        KUBEBYON_HAPROXY_NODE_ADDRESS_TYPE: 'both',
        KUBEBYON_HAPROXY_DEFAULT_BACKEND: 'console }\nbackend x',
        KUBEBYON_STATIC_NODE_ADDRESSES: 'node-1',
        KUBEBYON_RESYNC_INTERVAL_MS: 'soon',
        KUBEBYON_DATAPLANE_URL: 'ftp://x',
        KUBEBYON_DATAPLANE_PASSWORD: 'pw',
      });
    } catch (err) {
      error = err;
    }
    expect(error).toBeInstanceOf(ConfigError);
    const problems = (error as ConfigError).problems.map((p) => p.split(':')[0]);
    expect(problems.sort()).toEqual(
      [
        'KUBEBYON_DATAPLANE_URL',
        'KUBEBYON_HAPROXY_BIND_ADDR',
        'KUBEBYON_HAPROXY_DEFAULT_BACKEND',
        'KUBEBYON_HAPROXY_NODE_ADDRESS_TYPE',
        'KUBEBYON_RESYNC_INTERVAL_MS',
        'KUBEBYON_STATIC_NODE_ADDRESSES',
        'KUBEBYON_WEBHOOK_SECRET',
      ].sort(),
    );
  });
});

describe('haproxy provider settings', () => {
  const haproxy = { ...secret, KUBEBYON_PROVIDER: 'haproxy' };

  it('reads the owned file, the operator files, the master socket and the check binary', () => {
    expect(
      loadConfig({
        ...haproxy,
        KUBEBYON_HAPROXY_CHECK_FILES: '/etc/haproxy/haproxy.cfg, /etc/haproxy/extra.cfg',
      }).provider,
    ).toEqual({
      kind: 'haproxy',
      ownedFile: '/etc/haproxy/kubebyon.cfg',
      checkFiles: ['/etc/haproxy/haproxy.cfg', '/etc/haproxy/extra.cfg'],
      masterSocket: '/run/haproxy-master.sock',
      haproxyBin: 'haproxy',
      reloadTimeoutMs: 60000,
    });
  });

  it('refuses an owned file that is also one of the operator files, and relative paths', () => {
    for (const env of [
      { KUBEBYON_HAPROXY_CHECK_FILES: '/etc/haproxy/haproxy.cfg,/etc/haproxy/kubebyon.cfg' },
      { KUBEBYON_HAPROXY_CHECK_FILES: 'haproxy.cfg' },
    ]) {
      expect(() => loadConfig({ ...haproxy, ...env })).toThrow(/KUBEBYON_HAPROXY_CHECK_FILES/);
    }
    expect(() => loadConfig({ ...haproxy, KUBEBYON_HAPROXY_OWNED_FILE: 'kubebyon.cfg' })).toThrow(
      /KUBEBYON_HAPROXY_OWNED_FILE/,
    );
  });
});

describe('render defaults', () => {
  it('are what the service runs with when no KUBEBYON_HAPROXY_* variable is set', () => {
    expect(renderOptionsOf(loadConfig(secret).haproxy)).toEqual(DEFAULT_RENDER_OPTIONS);
  });
});
