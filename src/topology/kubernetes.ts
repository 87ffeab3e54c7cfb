import { existsSync } from 'node:fs';
import {
  CoreV1Api,
  type Informer,
  KubeConfig,
  type ObjectCache,
  type V1Node,
  type V1Service,
} from '@kubernetes/client-node';
import type { Logger } from 'pino';
import { RestartingWatch } from '../kube/restarting-watch.js';
import { slimListWatch } from '../kube/slim-informer.js';
import type { Metrics } from '../metrics/metrics.js';
import type { ClusterTarget } from '../model/cluster.js';
import {
  type NodeSelection,
  nodeFingerprint,
  selectNodeAddresses,
  serviceFingerprint,
  serviceNodePort,
  slimNode,
  slimService,
} from './kube-select.js';
import type { Topology, TopologyAnswer } from './topology.js';

const SERVICE_ACCOUNT_TOKEN = '/var/run/secrets/kubernetes.io/serviceaccount/token';

/** Credentials in the usual order: the pod's service account, else KUBECONFIG or ~/.kube/config. */
export function loadKubeConfig(env: NodeJS.ProcessEnv = process.env): KubeConfig {
  const kc = new KubeConfig();
  const file = env.KUBECONFIG?.split(':').find(Boolean);
  if (env.KUBERNETES_SERVICE_HOST && existsSync(SERVICE_ACCOUNT_TOKEN)) kc.loadFromCluster();
  // The environment given, not the process's (loadFromDefault reads process.env): its first file.
  else if (file) kc.loadFromFile(file);
  else kc.loadFromDefault();
  return kc;
}

type Watched<T extends V1Node | V1Service> = Informer<T> & ObjectCache<T>;

/**
 * Node addresses and Service NodePorts from the host cluster, kept current by informers (list, then watch;
 * a 410 relists). A broken watch keeps the last known objects and restarts with backoff; routes are never
 * wiped because the API went away. Changes that matter to routing call `onChange`; heartbeats do not.
 */
export class KubernetesTopology implements Topology {
  private readonly nodes: Watched<V1Node>;
  private readonly services: Watched<V1Service>;
  private readonly state: Record<'nodes' | 'services', RestartingWatch>;
  private readonly fingerprints = new Map<string, string>();
  private readonly onChange: (reason: string) => void;
  /** Moves with every change that matters to routing: answers of `endpointsFor` may be remembered until then. */
  private changes = 0;

  constructor(
    kc: KubeConfig,
    private readonly selection: NodeSelection,
    onChange: (reason: string) => void,
    private readonly metrics: Metrics,
    private readonly logger: Logger,
  ) {
    this.onChange = (reason) => {
      this.changes++;
      onChange(reason);
    };
    const core = kc.makeApiClient(CoreV1Api);
    this.nodes = slimListWatch<V1Node>(kc, '/api/v1/nodes', () => core.listNode(), slimNode);
    this.services = slimListWatch<V1Service>(
      kc,
      '/api/v1/services',
      () => core.listServiceForAllNamespaces(),
      slimService,
    );
    this.state = {
      nodes: this.watch('nodes', this.nodes, (n) => nodeFingerprint(n, this.selection)),
      services: this.watch('services', this.services, serviceFingerprint),
    };
  }

  /** Starts both watches; resolves after the first attempt of each (check `synced()` for success). */
  async start(): Promise<void> {
    await Promise.all([this.state.nodes.start(), this.state.services.start()]);
  }

  async stop(): Promise<void> {
    await Promise.all([this.state.nodes.stop(), this.state.services.stop()]);
  }

  synced(): boolean {
    return this.state.nodes.synced && this.state.services.synced;
  }

  revision(): number {
    return this.changes;
  }

  /** For /readyz: whether each watch is connected, and its last error. */
  health(): Record<string, { ok: boolean; detail?: string }> {
    const out: Record<string, { ok: boolean; detail?: string }> = {};
    for (const resource of ['nodes', 'services'] as const)
      out[`kubernetes_${resource}`] = this.state[resource].health();
    return out;
  }

  endpointsFor(target: ClusterTarget): TopologyAnswer {
    let port: number;
    if ('nodePort' in target) {
      port = target.nodePort;
    } else {
      const svc = this.services.get(target.service.name, target.service.namespace);
      const found = serviceNodePort(svc, target.service.port);
      if ('problem' in found) return { endpoints: [], problem: found.problem };
      port = found.nodePort;
    }
    const addresses = selectNodeAddresses(this.nodes.list(), this.selection);
    if (addresses.length === 0) return { endpoints: [], problem: 'no_nodes' };
    return { endpoints: addresses.map((address) => ({ address, port })) };
  }

  private watch<T extends V1Node | V1Service>(
    resource: 'nodes' | 'services',
    informer: Watched<T>,
    fingerprint: (o: T) => string,
  ) {
    const key = (o: T) => `${resource}/${o.metadata?.namespace ?? ''}/${o.metadata?.name ?? ''}`;
    const seen = (o: T) => {
      const k = key(o);
      const f = fingerprint(o);
      if (this.fingerprints.get(k) === f) return;
      this.fingerprints.set(k, f);
      this.onChange(resource);
    };
    informer.on('add', seen);
    informer.on('update', seen);
    informer.on('delete', (o) => {
      this.fingerprints.delete(key(o));
      this.onChange(resource);
    });
    return new RestartingWatch(informer, {
      resource,
      logger: this.logger,
      metrics: this.metrics,
      keeps: 'last known state',
      // The list went through: the cache is the cluster's truth from here on.
      synced: (first, recovered) => {
        if (first || recovered) this.onChange(resource);
      },
    });
  }
}
