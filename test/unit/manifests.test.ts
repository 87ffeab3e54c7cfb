import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { loadAllYaml } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { ENV_DEFAULTS, SECRET_VARS } from '../../src/config/env.js';

// The manifests and the code must agree: every variable the Deployment sets is one the service reads, every
// secret file it points at is a key of the Secret, and the optional ServiceMonitor scrapes the real Service.
const dir = join(import.meta.dirname, '../../deploy/kubernetes');
// biome-ignore lint/suspicious/noExplicitAny: manifests are read as plain YAML documents
const load = (file: string): any[] => loadAllYaml(readFileSync(join(dir, file), 'utf8'));

describe('deploy/kubernetes', () => {
  const objects = load('deployment.yaml');
  const deployment = objects.find((o) => o.kind === 'Deployment');
  const service = objects.find((o) => o.kind === 'Service');
  const container = deployment.spec.template.spec.containers[0];
  const env: Array<{ name: string; value: string }> = container.env;

  it('sets only variables the service reads', () => {
    const known = new Set<string>([
      ...Object.keys(ENV_DEFAULTS),
      ...SECRET_VARS,
      ...SECRET_VARS.map((v) => `${v}_FILE`),
    ]);
    expect(env.map((e) => e.name).filter((n) => !known.has(n))).toEqual([]);
  });

  it('points every secret file at a key of the Secret', () => {
    const secret = load('secret.example.yaml')[0];
    const mount = container.volumeMounts.find((m: { name: string }) => m.name === 'secrets').mountPath;
    const files = env.filter((x) => SECRET_VARS.some((v) => x.name === `${v}_FILE`));
    expect(files).toHaveLength(SECRET_VARS.length);
    for (const e of files) {
      expect(e.value.startsWith(`${mount}/`)).toBe(true);
      expect(Object.keys(secret.stringData)).toContain(e.value.slice(mount.length + 1));
    }
  });

  it('probes the service health endpoints on the named port', () => {
    expect(container.readinessProbe.httpGet).toEqual({ path: '/readyz', port: 'http' });
    expect(container.livenessProbe.httpGet).toEqual({ path: '/healthz', port: 'http' });
    expect(container.ports).toContainEqual(expect.objectContaining({ name: 'http', containerPort: 8080 }));
    expect(env).toContainEqual({ name: 'KUBEBYON_LISTEN_ADDR', value: '0.0.0.0:8080' });
  });

  it('runs the pod with the ServiceAccount that the RBAC manifests bind', () => {
    const rbac = load('rbac.yaml');
    const binding = rbac.find((o) => o.kind === 'ClusterRoleBinding');
    expect(binding.subjects).toContainEqual({
      kind: 'ServiceAccount',
      name: deployment.spec.template.spec.serviceAccountName,
      namespace: deployment.metadata.namespace,
    });
  });

  it('has a ServiceMonitor that selects the Service and scrapes its metrics port', () => {
    const monitor = load('optional/servicemonitor.yaml')[0];
    for (const [k, v] of Object.entries(monitor.spec.selector.matchLabels))
      expect(service.metadata.labels[k]).toBe(v);
    expect(service.spec.ports.map((p: { name: string }) => p.name)).toContain(monitor.spec.endpoints[0].port);
    expect(monitor.spec.endpoints[0].path).toBe('/metrics');
  });
});
