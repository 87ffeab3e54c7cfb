import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import {
  CoreV1Api,
  loadAllYaml,
  type V1Deployment,
  type V1PodDisruptionBudget,
} from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type KubeApiserver, startKubeApiserver } from '../support/kube-apiserver.js';

// deploy/kubernetes/ checked by the real kube-apiserver: a server-side dry run validates every object
// against the API's schemas and admission, without creating anything.
const MANIFESTS = join(import.meta.dirname, '../../deploy/kubernetes');
const KUBECTL = join(process.env.KUBEBYON_KUBE_CACHE ?? '/var/cache/kubebyon-kube', 'bin/kubectl');

describe('deploy/kubernetes manifests', () => {
  let kube: KubeApiserver;

  beforeAll(async () => {
    kube = await startKubeApiserver();
    // A dry run creates nothing, so the namespace the other objects live in must exist for real.
    await kube.admin
      .makeApiClient(CoreV1Api)
      .createNamespace({ body: { metadata: { name: 'kubebyon-system' } } });
  }, 300_000);

  afterAll(async () => {
    await kube?.stop();
  });

  it('pass a server-side dry run', () => {
    const out = execFileSync(KUBECTL, ['apply', '--dry-run=server', '-f', MANIFESTS, '-o', 'name'], {
      env: { ...process.env, KUBECONFIG: kube.env.KUBECONFIG ?? '' },
      encoding: 'utf8',
    });
    expect(out.split('\n').filter(Boolean).sort()).toEqual([
      'clusterrole.rbac.authorization.k8s.io/kubebyon-haproxy-adapter',
      'clusterrolebinding.rbac.authorization.k8s.io/kubebyon-haproxy-adapter',
      'customresourcedefinition.apiextensions.k8s.io/clusterroutes.kubebyon.io',
      'deployment.apps/kubebyon-haproxy-adapter',
      'namespace/kubebyon-system',
      'poddisruptionbudget.policy/kubebyon-haproxy-adapter',
      'role.rbac.authorization.k8s.io/kubebyon-haproxy-adapter',
      'rolebinding.rbac.authorization.k8s.io/kubebyon-haproxy-adapter',
      'secret/kubebyon-haproxy-adapter',
      'service/kubebyon-haproxy-adapter',
      'serviceaccount/kubebyon-haproxy-adapter',
    ]);
  });

  // What a dry run cannot see: a PDB or anti-affinity selecting no pod is valid, and does nothing.
  it('aim the disruption budget and the anti-affinity at the Deployment pods, leaving a drain room', () => {
    const load = <T>(file: string, kind: string) =>
      (loadAllYaml(readFileSync(join(MANIFESTS, file), 'utf8')) as { kind: string }[]).find(
        (o) => o.kind === kind,
      ) as T;
    const deployment = load<V1Deployment>('deployment.yaml', 'Deployment');
    const pdb = load<V1PodDisruptionBudget>('pdb.yaml', 'PodDisruptionBudget');
    const labels = deployment.spec?.template.metadata?.labels;
    expect(pdb.metadata?.namespace).toBe(deployment.metadata?.namespace);
    expect(pdb.spec?.selector?.matchLabels).toEqual(labels);
    expect(Number(pdb.spec?.minAvailable)).toBeLessThan(deployment.spec?.replicas ?? 1);
    const terms =
      deployment.spec?.template.spec?.affinity?.podAntiAffinity
        ?.preferredDuringSchedulingIgnoredDuringExecution ?? [];
    expect(terms.map((t) => t.podAffinityTerm.labelSelector?.matchLabels)).toEqual([labels]);
  });

  it('are refused by the dry run when broken, so the check can fail', () => {
    const broken = `apiVersion: apps/v1
kind: Deployment
metadata: {name: broken, namespace: kubebyon-system}
spec:
  selector: {matchLabels: {app: a}}
  template:
    metadata: {labels: {app: b}}
    spec: {containers: [{name: c, image: x}]}
`;
    expect(() =>
      execFileSync(KUBECTL, ['apply', '--dry-run=server', '-f', '-'], {
        env: { ...process.env, KUBECONFIG: kube.env.KUBECONFIG ?? '' },
        input: broken,
        stdio: ['pipe', 'pipe', 'pipe'],
      }),
    ).toThrow(/`selector` does not match template `labels`/);
  });
});
