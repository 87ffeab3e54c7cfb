import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { type KubernetesObject, loadAllYaml } from '@kubernetes/client-node';

/**
 * The Helm chart, the one source of the Kubernetes objects: rendered with the pinned Helm
 * (scripts/kube/build-helm.sh) as a release named like the chart in kubebyon-system, so that its
 * ServiceAccount is the identity test/support/kube-apiserver.ts gives the adapter's token.
 */
export const CHART = join(import.meta.dirname, '../../charts/kubebyon-haproxy-adapter');
export const CRD_FILE = join(CHART, 'crds/clusterroutes.kubebyon.io.yaml');
export const HELM = join(process.env.KUBEBYON_KUBE_CACHE ?? '/var/cache/kubebyon-kube', 'bin/helm');
export const RELEASE = 'kubebyon-haproxy-adapter';
export const NAMESPACE = 'kubebyon-system';

// biome-ignore lint/suspicious/noExplicitAny: rendered objects are read as plain YAML documents
export type Manifest = KubernetesObject & Record<string, any>;

const rendered = new Map<string, string>();

/** `helm template` of the chart with `args` (e.g. `--set mode=sidecar`): its YAML text, cached per args. */
export function templateChart(args: readonly string[] = []): string {
  const key = JSON.stringify(args);
  let text = rendered.get(key);
  if (text === undefined) {
    text = execFileSync(
      HELM,
      ['template', RELEASE, CHART, '--namespace', NAMESPACE, '--include-crds', ...args],
      { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] },
    );
    rendered.set(key, text);
  }
  return text;
}

/** The rendered objects. */
export function renderChart(args: readonly string[] = []): Manifest[] {
  return (loadAllYaml(templateChart(args)) as Array<Manifest | null>).filter(
    (o): o is Manifest => o !== null && typeof o === 'object',
  );
}

const RBAC_KINDS = new Set(['ServiceAccount', 'ClusterRole', 'ClusterRoleBinding', 'Role', 'RoleBinding']);

/** The adapter's identity and rights as the chart installs them (central shape, the default). */
export function chartRbac(args: readonly string[] = []): Manifest[] {
  return renderChart(args).filter((o) => RBAC_KINDS.has(o.kind ?? ''));
}

/** The ClusterRoute CustomResourceDefinition (crds/ is not templated: read as it is). */
export function clusterRouteCrd(): Manifest {
  return loadAllYaml(readFileSync(CRD_FILE, 'utf8'))[0] as Manifest;
}
