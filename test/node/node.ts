import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect } from 'node:tls';
import { promisify } from 'node:util';
import { inject } from 'vitest';

const run = promisify(execFile);
export const repo = join(import.meta.dirname, '..', '..');

/** What the node suite's global setup brought up (test/node/global-setup.ts). */
export function nodeContext() {
  const env = inject('nodeEnv');
  const images = inject('nodeImages');
  return {
    kubeconfig: env.KUBECONFIG ?? '',
    nodeIp: env.KUBE_NODE_IP ?? '',
    nodeName: env.KUBE_NODE_NAME ?? '',
    nodeDir: env.KUBE_NODE_DIR ?? '',
    kubectlBin: join(process.env.KUBEBYON_KUBE_CACHE ?? '/var/cache/kubebyon-kube', 'bin', 'kubectl'),
    helmBin: inject('helmBin'),
    nodeUpSeconds: inject('nodeUpSeconds'),
    images: {
      adapter: images.IMAGE_ADAPTER ?? '',
      haproxy: images.IMAGE_HAPROXY ?? '',
      vcluster: images.IMAGE_VCLUSTER ?? '',
    },
  };
}

export interface Cli {
  (...args: string[]): Promise<string>;
  /** The same, with the input on stdin (`-f -`). */
  withInput(input: string, ...args: string[]): Promise<string>;
}

/** A command-line tool run with the node's admin kubeconfig; rejects with its stderr when it fails. */
export function cli(bin: string, kubeconfig: string, timeoutMs = 240_000): Cli {
  const env = {
    ...process.env,
    KUBECONFIG: kubeconfig,
    HELM_CACHE_HOME: join(tmpdir(), 'kubebyon-node-helm'),
  };
  const call = async (input: string | undefined, args: string[]) => {
    const child = run(bin, args, { env, timeout: timeoutMs, maxBuffer: 64 << 20 });
    if (input !== undefined) {
      child.child.stdin?.end(input);
    }
    try {
      return (await child).stdout;
    } catch (err) {
      const e = err as { stderr?: string; message: string };
      throw new Error(`${bin.split('/').pop()} ${args.join(' ')}: ${e.stderr || e.message}`);
    }
  };
  const f = ((...args: string[]) => call(undefined, args)) as Cli;
  f.withInput = (input, ...args) => call(input, args);
  return f;
}

/** A CA and a serving certificate for `host` (and a service-account key), made with openssl. */
export async function servingCert(host: string) {
  const dir = mkdtempSync(join(tmpdir(), 'kubebyon-node-pki-'));
  const ossl = (...args: string[]) => run('openssl', args, { cwd: dir });
  await ossl(
    'req',
    '-x509',
    '-newkey',
    'rsa:2048',
    '-nodes',
    '-days',
    '1',
    '-subj',
    '/CN=kubebyon-node-test-ca',
    '-keyout',
    'ca.key',
    '-out',
    'ca.crt',
  );
  await ossl(
    'req',
    '-newkey',
    'rsa:2048',
    '-nodes',
    '-keyout',
    'tls.key',
    '-out',
    'tls.csr',
    '-subj',
    `/CN=${host}`,
  );
  writeFileSync(join(dir, 'ext'), `subjectAltName=DNS:${host}\nextendedKeyUsage=serverAuth\n`);
  await ossl(
    'x509',
    '-req',
    '-in',
    'tls.csr',
    '-CA',
    'ca.crt',
    '-CAkey',
    'ca.key',
    '-CAcreateserial',
    '-days',
    '1',
    '-extfile',
    'ext',
    '-out',
    'tls.crt',
  );
  await ossl('genrsa', '-out', 'sa.key', '2048');
  const read = (f: string) => readFileSync(join(dir, f), 'utf8');
  return { dir, ca: read('ca.crt'), cert: read('tls.crt'), key: read('tls.key'), saKey: read('sa.key') };
}

/**
 * A TLS handshake to `address`:443 carrying `servername` as SNI (no certificate check): true when a backend
 * completed it, false when HAProxy closed the connection (no route) or nothing answered.
 */
export function sniReaches(
  address: string,
  servername: string,
  port = 443,
  timeoutMs = 3000,
): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ host: address, port, servername, rejectUnauthorized: false });
    const done = (ok: boolean) => {
      clearTimeout(timer);
      socket.destroy();
      resolve(ok);
    };
    const timer = setTimeout(() => done(false), timeoutMs);
    socket.on('secureConnect', () => done(true));
    socket.on('error', () => done(false));
    socket.on('close', () => done(false));
  });
}

export const seconds = (fromMs: number) => Number(((Date.now() - fromMs) / 1000).toFixed(1));

/** `--set key=value` for each entry, in order (helm's flags for a chart's values). */
export function chartSets(values: Record<string, string | number>): string[] {
  return Object.entries(values).flatMap(([key, value]) => ['--set', `${key}=${value}`]);
}

/** The vCluster's namespace and the secret its pod mounts: serving certificate and key, SA key, tokens. */
export async function createVclusterPki(kubectl: Cli, ns: string, pkiDir: string): Promise<void> {
  await kubectl('create', 'namespace', ns);
  await kubectl(
    '-n',
    ns,
    'create',
    'secret',
    'generic',
    'demo-pki',
    `--from-file=tls.crt=${join(pkiDir, 'tls.crt')}`,
    `--from-file=tls.key=${join(pkiDir, 'tls.key')}`,
    `--from-file=sa.key=${join(pkiDir, 'sa.key')}`,
    `--from-file=tokens.csv=${join(pkiDir, 'tokens.csv')}`,
  );
}

const VCLUSTER_LABELS = { app: 'vcluster-demo' };

/** The vCluster: kube-apiserver and etcd in one pod (`image`), serving with the `demo-pki` secret. */
export function vclusterDeployment(ns: string, image: string) {
  return {
    apiVersion: 'apps/v1',
    kind: 'Deployment',
    metadata: { name: 'demo', namespace: ns },
    spec: {
      replicas: 1,
      selector: { matchLabels: VCLUSTER_LABELS },
      template: {
        metadata: { labels: VCLUSTER_LABELS },
        spec: {
          automountServiceAccountToken: false,
          terminationGracePeriodSeconds: 5,
          containers: [
            {
              name: 'apiserver',
              image,
              imagePullPolicy: 'Never',
              env: [{ name: 'POD_IP', valueFrom: { fieldRef: { fieldPath: 'status.podIP' } } }],
              ports: [{ containerPort: 6443, name: 'https' }],
              readinessProbe: {
                httpGet: { path: '/readyz', port: 6443, scheme: 'HTTPS' },
                periodSeconds: 2,
              },
              volumeMounts: [
                { name: 'pki', mountPath: '/pki', readOnly: true },
                { name: 'data', mountPath: '/var/lib/vcluster' },
              ],
            },
          ],
          volumes: [
            { name: 'pki', secret: { secretName: 'demo-pki' } },
            { name: 'data', emptyDir: {} },
          ],
        },
      },
    },
  };
}

/** The vCluster's NodePort Service (`nodePort`: a given port, else one the cluster picks). */
export function vclusterService(ns: string, nodePort?: number) {
  return {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: { name: 'demo', namespace: ns },
    spec: {
      type: 'NodePort',
      selector: VCLUSTER_LABELS,
      ports: [{ name: 'https', port: 443, targetPort: 6443, ...(nodePort ? { nodePort } : {}) }],
    },
  };
}
