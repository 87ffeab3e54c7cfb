import pino from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config/env.js';
import { Fleet, type Lane } from '../../src/fleet/fleet.js';
import type { ClusterRecord } from '../../src/model/cluster.js';
import type { Reconciler } from '../../src/reconcile/reconciler.js';
import type { ClusterStatus } from '../../src/reconcile/status.js';
import type { PublishedStatus } from '../../src/store/desired-store.js';
import { startElection } from '../../src/wiring.js';
import { waitFor } from '../support/wait.js';

// The sidecar shape: every replica applies to the HAProxy beside it (its lanes run whether or not it holds
// the Lease), and only the Lease's holder publishes statuses. The central shape is unchanged: the leader
// applies and publishes, a standby does neither.

const record: ClusterRecord = {
  name: 'demo',
  host: 'demo.example.com',
  target: { nodePort: 30443 },
  claimedAt: 1_000,
  updatedAt: 2_000,
};

const applied: ClusterStatus = {
  name: 'demo',
  host: 'demo.example.com',
  authorized_networks: [],
  api_endpoint: 'https://demo.example.com:443',
  state: 'applied',
  reason: null,
  last_applied_at: '2026-01-01T00:00:00.000Z',
  backend: 'kubebyon_slot_1',
  servers: ['198.18.0.1:30443'],
};

/** A fleet over one fake instance whose every pass judges every cluster, and the store it publishes to. */
function setup() {
  const published: Array<{ name: string; status: PublishedStatus }> = [];
  const requests: string[] = [];
  let passed: ((clusters: ReadonlySet<string> | 'all') => void) | undefined;
  const loop = {
    status: (name: string) => (name === record.name ? applied : undefined),
    statuses: () => [applied],
    request: async (reason: string) => {
      requests.push(reason);
      passed?.('all');
      return { ok: true, changed: true };
    },
    stop: async () => {},
  } as unknown as Reconciler;
  const fleet = new Fleet({
    store: {
      list: () => [record],
      get: (name) => (name === record.name ? record : undefined),
      published: () => undefined,
      publish: (name, status) => published.push({ name, status }),
    },
    makeLane: async (_target, p): Promise<Lane> => {
      passed = p;
      return { loop, ping: async () => ({ version: '3.0', endpoint: 'fake' }), close: async () => {} };
    },
    logger: pino({ level: 'silent' }),
    single: true,
    waitTimeoutMs: 1_000,
  });
  const target = { name: 'default', key: 'fake' };
  return { fleet, target, published, requests };
}

/** Longer than the publisher's delay (200 ms): whatever was marked has been published by then. */
const settle = () => new Promise((resolve) => setTimeout(resolve, 400));

describe('Fleet publishing, apart from applying', () => {
  const fleets: Fleet[] = [];
  afterEach(async () => {
    for (const f of fleets.splice(0)) await f.stop(0);
  });

  it('applies without publishing until it holds the Lease, then publishes every status', async () => {
    const { fleet, target, published, requests } = setup();
    fleets.push(fleet);
    await fleet.setTargets([target]);
    await fleet.lead({ publish: false });
    expect(fleet.isLeading).toBe(true);
    expect(fleet.isPublishing).toBe(false);
    // Its own HAProxy gets the change, and the answer is its own (not a wait for a leader).
    expect(await fleet.request('webhook', { clusters: ['demo'] })).toEqual({ ok: true, changed: true });
    expect(requests).toEqual(['webhook']);
    expect(fleet.status('demo')?.state).toBe('applied');
    await settle();
    expect(published).toEqual([]);

    fleet.setPublishing(true);
    await waitFor(() => published.length > 0, 5_000, 'the statuses to be published');
    expect(published[0]).toMatchObject({ name: 'demo', status: { state: 'applied', observed: 2_000 } });

    fleet.setPublishing(false);
    const before = published.length;
    await fleet.request('webhook', { clusters: ['demo'] });
    expect(requests).toHaveLength(2);
    await settle();
    expect(published).toHaveLength(before);
  });

  it('leads as before by default: applies and publishes; a standby does neither', async () => {
    const { fleet, target, published, requests } = setup();
    fleets.push(fleet);
    await fleet.setTargets([target]);
    await fleet.lead();
    expect(fleet.isPublishing).toBe(true);
    await fleet.request('webhook', { clusters: ['demo'] });
    await waitFor(() => published.length > 0, 5_000, 'the statuses to be published');

    await fleet.standby();
    expect(fleet.isPublishing).toBe(false);
    const before = published.length;
    // A standby waits for the leader's status instead of applying (and times out here: none comes).
    const outcome = await fleet.request('webhook', { clusters: ['demo'] });
    expect(outcome.ok).toBe(false);
    expect(requests).toHaveLength(1);
    await settle();
    expect(published).toHaveLength(before);
  });
});

describe('startElection without a Lease', () => {
  it('leads and publishes at once', async () => {
    const calls: string[] = [];
    const config = loadConfig({ KUBEBYON_WEBHOOK_SECRET: 'x'.repeat(20), KUBEBYON_PROVIDER: 'memory' });
    const metrics = { leader: { set: (v: number) => calls.push(`leader=${v}`) } };
    const elector = await startElection(
      config,
      {
        lead: async (o?: { publish?: boolean }) => void calls.push(`lead publish=${o?.publish ?? true}`),
        standby: async () => void calls.push('standby'),
        setPublishing: (on: boolean) => void calls.push(`publishing=${on}`),
      },
      {
        logger: pino({ level: 'silent' }),
        metrics: metrics as never,
        kubeConfig: () => Promise.reject(new Error('no Kubernetes here')),
      },
    );
    expect(elector).toBeUndefined();
    expect(calls).toEqual(['leader=1', 'lead publish=true']);
  });
});
