import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { CoreV1Api } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig, SECRET_VARS } from '../../src/config/env.js';
import {
  CHART,
  HELM,
  type Manifest,
  NAMESPACE,
  RELEASE,
  renderChart,
  templateChart,
} from '../support/chart.js';
import { type KubeApiserver, startKubeApiserver } from '../support/kube-apiserver.js';

// The Helm chart, the one source of the Kubernetes install: `helm lint`, what `helm template` renders in
// each shape (checked against what the code reads), and a server-side dry run of both renderings by the real
// kube-apiserver, which validates every object against the API's schemas and admission.
const KUBECTL = join(process.env.KUBEBYON_KUBE_CACHE ?? '/var/cache/kubebyon-kube', 'bin/kubectl');
const SIDECAR = ['--set', 'mode=sidecar'];
const SECRET_MOUNT = '/var/run/secrets/kubebyon';

type Env = { name: string; value?: string; valueFrom?: { fieldRef?: { fieldPath: string } } };
// biome-ignore lint/suspicious/noExplicitAny: rendered objects are read as plain YAML documents
type Container = Record<string, any> & { name: string; env?: Env[] };

const find = (objects: Manifest[], kind: string, name: string) => {
  const found = objects.find((o) => o.kind === kind && o.metadata?.name === name);
  if (!found) throw new Error(`no ${kind} ${name} in the rendering`);
  return found;
};
const container = (workload: Manifest, name: string): Container =>
  workload.spec.template.spec.containers.find((c: Container) => c.name === name);
const envOf = (c: Container) => Object.fromEntries((c.env ?? []).map((e) => [e.name, e]));

/**
 * The settings the adapter container gets, as the kubelet would resolve them on a pod (fieldRefs, $(VAR)
 * references) and with its secret files replaced by values: what `serve` would start with.
 */
function resolvedEnv(c: Container): Record<string, string> {
  const pod: Record<string, string> = {
    'metadata.name': 'edge-abcde',
    'metadata.namespace': NAMESPACE,
    'status.podIP': '198.18.0.1',
  };
  const env: Record<string, string> = {};
  for (const e of c.env ?? []) {
    const raw = e.valueFrom?.fieldRef ? (pod[e.valueFrom.fieldRef.fieldPath] ?? '') : (e.value ?? '');
    env[e.name] = raw.replace(/\$\(([A-Z_]+)\)/g, (_m, v: string) => env[v] ?? '');
  }
  for (const v of SECRET_VARS)
    if (env[`${v}_FILE`]) {
      delete env[`${v}_FILE`];
      env[v] = 'a-secret-of-at-least-16-characters';
    }
  return env;
}

describe('the chart, rendered', () => {
  it('is lint clean in both shapes', () => {
    for (const args of [[], SIDECAR, ['--set', 'edge.kind=Deployment']]) {
      const out = execFileSync(HELM, ['lint', '--strict', CHART, ...args], { encoding: 'utf8' });
      expect(out).toMatch(/1 chart\(s\) linted, 0 chart\(s\) failed/);
    }
  });

  it('refuses a shape or an edge kind it does not know, naming the value', () => {
    for (const [args, why] of [
      [['--set', 'mode=both'], /mode must be central or sidecar/],
      [['--set', 'edge.kind=StatefulSet'], /edge.kind must be DaemonSet or Deployment/],
    ] as const)
      expect(() => templateChart(args)).toThrow(why);
  });

  describe('central', () => {
    const objects = renderChart();
    const adapter = find(objects, 'Deployment', RELEASE);
    const edge = find(objects, 'DaemonSet', `${RELEASE}-edge`);
    const c = container(adapter, 'adapter');
    const env = envOf(c);

    it('runs the adapter image with serve, on settings the service takes', () => {
      expect(c.image).toBe('kubebyon/haproxy-adapter:0.1.0');
      expect(c.args).toEqual(['serve']);
      const config = loadConfig(resolvedEnv(c));
      expect(config.provider.kind).toBe('dataplaneapi');
      expect(config.fleet).toMatchObject({ store: 'kubernetes', namespace: NAMESPACE });
      expect(config.fleet.leaderElection).toMatchObject({ identity: 'edge-abcde', apply: 'leader' });
      expect(config.topology.kind).toBe('kubernetes');
    });

    it('points every secret file at a key of the existing Secret it mounts', () => {
      const volume = adapter.spec.template.spec.volumes.find((v: { name: string }) => v.name === 'secrets');
      expect(volume.secret.secretName).toBe(RELEASE);
      expect(c.volumeMounts).toContainEqual({ name: 'secrets', mountPath: SECRET_MOUNT, readOnly: true });
      const files = SECRET_VARS.map((v) => env[`${v}_FILE`]?.value);
      expect(files.sort()).toEqual([`${SECRET_MOUNT}/dataplane-password`, `${SECRET_MOUNT}/webhook-secret`]);
      // The edge pods' Data Plane API user gets its password from the same Secret and key.
      const dp = envOf(container(edge, 'haproxy')).DATAPLANE_PASSWORD;
      expect(dp?.valueFrom).toEqual({ secretKeyRef: { name: RELEASE, key: 'dataplane-password' } });
    });

    it('drives the edge pods it renders, at their Data Plane API port', () => {
      const selector = String(env.KUBEBYON_HAPROXY_POD_SELECTOR?.value);
      const labels = edge.spec.template.metadata.labels;
      for (const term of selector.split(',')) {
        const [k, v] = term.split('=');
        expect(labels[k as string], term).toBe(v);
      }
      const haproxy = container(edge, 'haproxy');
      expect(haproxy.image).toBe('haproxytech/haproxy-debian:3.0');
      expect(haproxy.ports).toContainEqual({
        name: 'dataplane',
        containerPort: Number(env.KUBEBYON_DATAPLANE_POD_PORT?.value),
        protocol: 'TCP',
      });
      expect(haproxy.readinessProbe.tcpSocket).toEqual({ port: 'dataplane' });
    });

    it('probes the health endpoints on the port the service listens on', () => {
      expect(c.readinessProbe.httpGet).toEqual({ path: '/readyz', port: 'http' });
      expect(c.livenessProbe.httpGet).toEqual({ path: '/healthz', port: 'http' });
      expect(c.ports).toContainEqual({ name: 'http', containerPort: 8080, protocol: 'TCP' });
      expect(env.KUBEBYON_LISTEN_ADDR?.value).toBe('0.0.0.0:8080');
    });

    it('runs restricted: non-root, read-only root, no capability, RuntimeDefault, a projected token', () => {
      const pod = adapter.spec.template.spec;
      expect(pod.securityContext).toMatchObject({
        runAsNonRoot: true,
        runAsUser: 10001,
        seccompProfile: { type: 'RuntimeDefault' },
      });
      expect(c.securityContext).toMatchObject({
        runAsNonRoot: true,
        allowPrivilegeEscalation: false,
        readOnlyRootFilesystem: true,
        capabilities: { drop: ['ALL'] },
      });
      expect(pod.automountServiceAccountToken).toBe(false);
      const token = pod.volumes.find((v: { name: string }) => v.name === 'kube-api-access');
      expect(token.projected.sources[0].serviceAccountToken).toMatchObject({ path: 'token' });
      expect(c.volumeMounts).toContainEqual({
        name: 'kube-api-access',
        mountPath: '/var/run/secrets/kubernetes.io/serviceaccount',
        readOnly: true,
      });
      const binding = find(objects, 'ClusterRoleBinding', RELEASE);
      expect(binding.subjects).toContainEqual({
        kind: 'ServiceAccount',
        name: pod.serviceAccountName,
        namespace: NAMESPACE,
      });
    });

    it('aims the disruption budget and the anti-affinity at the adapter pods, leaving a drain room', () => {
      const labels = adapter.spec.template.metadata.labels;
      const pdb = find(objects, 'PodDisruptionBudget', RELEASE);
      for (const [k, v] of Object.entries(pdb.spec.selector.matchLabels)) expect(labels[k]).toBe(v);
      expect(Number(pdb.spec.minAvailable)).toBeLessThan(adapter.spec.replicas);
      const terms =
        adapter.spec.template.spec.affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution;
      expect(terms[0].podAffinityTerm.labelSelector.matchLabels).toEqual(pdb.spec.selector.matchLabels);
      expect(adapter.spec.strategy.rollingUpdate).toEqual({ maxUnavailable: 0, maxSurge: 1 });
    });

    it("puts HAProxy on the selected nodes' :443, with NET_BIND_SERVICE and nothing else", () => {
      const pod = edge.spec.template.spec;
      expect(pod.hostNetwork).toBe(true);
      expect(pod.nodeSelector).toEqual({ 'kubernetes.io/os': 'linux' });
      const haproxy = container(edge, 'haproxy');
      expect(haproxy.ports).toContainEqual({ name: 'https', containerPort: 443, protocol: 'TCP' });
      expect(haproxy.securityContext).toMatchObject({
        runAsUser: 0,
        readOnlyRootFilesystem: true,
        allowPrivilegeEscalation: false,
        capabilities: { drop: ['ALL'], add: ['NET_BIND_SERVICE'] },
      });
      expect(pod.automountServiceAccountToken).toBe(false);
      const chosen = renderChart(['--set', 'edge.nodeSelector.kubebyon\\.io/edge=true']);
      expect(find(chosen, 'DaemonSet', `${RELEASE}-edge`).spec.template.spec.nodeSelector).toEqual({
        'kubebyon.io/edge': 'true',
        'kubernetes.io/os': 'linux',
      });
    });

    it('serves the webhook and metrics from the adapter pods, and can scrape them', () => {
      const service = find(objects, 'Service', RELEASE);
      const labels = adapter.spec.template.metadata.labels;
      for (const [k, v] of Object.entries(service.spec.selector)) expect(labels[k]).toBe(v);
      expect(service.spec.ports).toContainEqual(
        expect.objectContaining({ name: 'http', targetPort: 'http' }),
      );
      expect(objects.some((o) => o.kind === 'ServiceMonitor')).toBe(false);
      const monitored = renderChart(['--set', 'metrics.serviceMonitor.enabled=true']);
      const monitor = find(monitored, 'ServiceMonitor', RELEASE);
      expect(monitor.spec.selector.matchLabels).toEqual(service.spec.selector);
      expect(monitor.spec.endpoints).toEqual([{ port: 'http', path: '/metrics', interval: '30s' }]);
    });

    it('runs the edge as a Deployment when asked, one per node, with its own disruption budget', () => {
      const deployed = renderChart(['--set', 'edge.kind=Deployment', '--set', 'edge.replicas=3']);
      const workload = find(deployed, 'Deployment', `${RELEASE}-edge`);
      expect(workload.spec.replicas).toBe(3);
      expect(workload.spec.strategy.rollingUpdate).toEqual({ maxSurge: 0, maxUnavailable: 1 });
      expect(find(deployed, 'PodDisruptionBudget', `${RELEASE}-edge`).spec.selector.matchLabels).toEqual(
        workload.spec.selector.matchLabels,
      );
      expect(deployed.some((o) => o.kind === 'DaemonSet')).toBe(false);
    });
  });

  describe('sidecar', () => {
    const objects = renderChart(SIDECAR);
    const edge = find(objects, 'DaemonSet', `${RELEASE}-edge`);
    const haproxy = container(edge, 'haproxy');
    const c = container(edge, 'adapter');
    const config = loadConfig(resolvedEnv(c));

    it('runs no adapter Deployment: each edge pod carries its own adapter, which applies always', () => {
      expect(objects.filter((o) => o.kind === 'Deployment')).toEqual([]);
      expect(haproxy.image).toBe('kubebyon-testbed/haproxy:3.0');
      expect(config.provider.kind).toBe('haproxy');
      expect(config.fleet.leaderElection).toMatchObject({ identity: 'edge-abcde', apply: 'always' });
      expect(config.fleet).not.toHaveProperty('discovery');
      // On the node's network: the webhook listens on the pod's (the node's) address only.
      expect(config.listen).toEqual({ host: '198.18.0.1', port: 8080 });
      const pod = edge.spec.template.spec;
      expect(pod.serviceAccountName).toBe(RELEASE);
      expect(c.securityContext).toMatchObject({ runAsNonRoot: true, readOnlyRootFilesystem: true });
    });

    it('drives the HAProxy beside it through the shared folder: its owned file and its master socket', () => {
      if (config.provider.kind !== 'haproxy') throw new Error('not the stock provider');
      const { ownedFile, masterSocket, checkFiles } = config.provider;
      const mountOf = (ct: Container, name: string) =>
        ct.volumeMounts.find((m: { name: string }) => m.name === name)?.mountPath;
      expect(mountOf(c, 'run')).toBe(mountOf(haproxy, 'run'));
      expect(ownedFile.startsWith(`${mountOf(c, 'run')}/`)).toBe(true);
      expect(masterSocket.startsWith(`${mountOf(c, 'run')}/`)).toBe(true);
      // HAProxy loads the file the adapter checks with and the one it owns, and opens the socket it uses.
      const cm = find(objects, 'ConfigMap', `${RELEASE}-haproxy`);
      expect(haproxy.command).toEqual(['/bin/sh', '/etc/haproxy/start.sh']);
      expect(cm.data['start.sh']).toContain(`-S ${masterSocket},`);
      expect(cm.data['start.sh']).toContain(`-f ${ownedFile}`);
      expect(checkFiles).toEqual(['/etc/haproxy/haproxy.cfg']);
      expect(mountOf(c, 'haproxy-config')).toBe('/etc/haproxy');
      expect(mountOf(haproxy, 'haproxy-config')).toBe('/etc/haproxy');
      expect(cm.data['haproxy.cfg']).toMatch(/^global\n/m);
      expect(edge.spec.template.spec.securityContext.fsGroup).toBe(10001);
    });

    it('serves the webhook from the edge pods; the Role reads no pods', () => {
      const service = find(objects, 'Service', RELEASE);
      const labels = edge.spec.template.metadata.labels;
      for (const [k, v] of Object.entries(service.spec.selector)) expect(labels[k]).toBe(v);
      const role = find(objects, 'Role', RELEASE);
      expect(role.rules.flatMap((r: { resources: string[] }) => r.resources)).not.toContain('pods');
      expect(c.ports).toContainEqual({ name: 'http', containerPort: 8080, protocol: 'TCP' });
    });
  });
});

describe('the chart, dry run on a real kube-apiserver', () => {
  let kube: KubeApiserver;
  const kubectl = (args: string[], input: string) =>
    execFileSync(KUBECTL, args, {
      env: { ...process.env, KUBECONFIG: kube.env.KUBECONFIG ?? '' },
      input,
      encoding: 'utf8',
      stdio: ['pipe', 'pipe', 'pipe'],
    });

  beforeAll(async () => {
    kube = await startKubeApiserver();
    // A dry run creates nothing, so the namespace the objects live in must exist for real.
    await kube.admin.makeApiClient(CoreV1Api).createNamespace({ body: { metadata: { name: NAMESPACE } } });
  }, 300_000);

  afterAll(async () => {
    await kube?.stop();
  });

  it.each([
    ['central', []],
    ['sidecar', SIDECAR],
    ['central, edge as a Deployment', ['--set', 'edge.kind=Deployment']],
  ])('passes in the %s shape', (_shape, args) => {
    const out = kubectl(['apply', '--dry-run=server', '-f', '-', '-o', 'name'], templateChart(args));
    const names = out.split('\n').filter(Boolean).sort();
    const sidecar = args === SIDECAR;
    const edgeKind = args.includes('edge.kind=Deployment') ? 'deployment.apps' : 'daemonset.apps';
    expect(names).toEqual(
      [
        'clusterrole.rbac.authorization.k8s.io/kubebyon-haproxy-adapter',
        'clusterrolebinding.rbac.authorization.k8s.io/kubebyon-haproxy-adapter',
        'configmap/kubebyon-haproxy-adapter-haproxy',
        'customresourcedefinition.apiextensions.k8s.io/clusterroutes.kubebyon.io',
        `${edgeKind}/kubebyon-haproxy-adapter-edge`,
        ...(sidecar
          ? []
          : [
              'deployment.apps/kubebyon-haproxy-adapter',
              'poddisruptionbudget.policy/kubebyon-haproxy-adapter',
            ]),
        ...(edgeKind === 'deployment.apps'
          ? ['poddisruptionbudget.policy/kubebyon-haproxy-adapter-edge']
          : []),
        'role.rbac.authorization.k8s.io/kubebyon-haproxy-adapter',
        'rolebinding.rbac.authorization.k8s.io/kubebyon-haproxy-adapter',
        'service/kubebyon-haproxy-adapter',
        'serviceaccount/kubebyon-haproxy-adapter',
      ].sort(),
    );
  });

  it('installs with helm (CRD included) and upgrades to another image tag, saying what to do next', () => {
    const helm = (args: string[]) =>
      execFileSync(HELM, [...args, '--namespace', NAMESPACE], {
        env: { ...process.env, KUBECONFIG: kube.env.KUBECONFIG ?? '' },
        encoding: 'utf8',
        stdio: ['ignore', 'pipe', 'pipe'],
      });
    const installed = helm(['install', RELEASE, CHART, ...SIDECAR]);
    expect(installed).toMatch(/^STATUS: deployed$/m);
    // NOTES.txt: the Secret to create first, with the keys this shape reads.
    expect(installed).toContain(`create secret generic ${RELEASE}`);
    expect(installed).toContain('--from-literal=webhook-secret=');
    expect(installed).not.toContain('dataplane-password');
    expect(installed).toContain(`rollout status daemonset/${RELEASE}-edge`);
    expect(kubectl(['get', 'clusterroutes', '-n', NAMESPACE, '-o', 'name'], '')).toBe('');
    const upgraded = helm(['upgrade', RELEASE, CHART, ...SIDECAR, '--set', 'adapter.image.tag=0.1.1']);
    expect(upgraded).toMatch(/^REVISION: 2$/m);
    const image = kubectl(
      [
        'get',
        'daemonset',
        `${RELEASE}-edge`,
        '-n',
        NAMESPACE,
        '-o',
        'jsonpath={.spec.template.spec.containers[1].image}',
      ],
      '',
    );
    expect(image).toBe('kubebyon/haproxy-adapter:0.1.1');
    helm(['uninstall', RELEASE]);
  });

  it('is refused when broken, so the check can fail', () => {
    const broken = `apiVersion: apps/v1
kind: Deployment
metadata: {name: broken, namespace: ${NAMESPACE}}
spec:
  selector: {matchLabels: {app: a}}
  template:
    metadata: {labels: {app: b}}
    spec: {containers: [{name: c, image: x}]}
`;
    expect(() => kubectl(['apply', '--dry-run=server', '-f', '-'], broken)).toThrow(
      /`selector` does not match template `labels`/,
    );
  });
});
