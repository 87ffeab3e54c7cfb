import { z } from 'zod';
import { CLUSTER_STATES } from '../reconcile/status.js';
import { MAX_AUTHORIZED_NETWORKS, type NetworkRejection } from '../routes/networks.js';
import { ClusterBody, ClusterSetBody } from './schemas.js';

const schema = (s: z.ZodType) => {
  const { $schema: _ignored, ...rest } = z.toJSONSchema(s) as Record<string, unknown>;
  return rest;
};

const ErrorBody = {
  type: 'object',
  properties: {
    error: { type: 'string' },
    field: { type: 'string' },
    reason: { type: 'string' },
    detail: { type: 'string' },
  },
  required: ['error'],
};

// Every reason an authorized_networks entry (or the list) is refused with: the 422's `reason`.
const NETWORK_REJECTIONS: readonly NetworkRejection[] = [
  'network_invalid',
  'network_prefix_invalid',
  'network_host_bits_set',
  'network_ipv4_mapped',
  'network_duplicate',
  'too_many_networks',
];

const ClusterStatus = {
  type: 'object',
  properties: {
    name: { type: 'string' },
    host: { type: 'string' },
    authorized_networks: {
      type: 'array',
      items: { type: 'string' },
      maxItems: MAX_AUTHORIZED_NETWORKS,
      description:
        'Who may reach the cluster, as stored: canonical CIDRs (IPv4 first, then by address and prefix); empty: open to all',
      examples: [['203.0.113.0/24', '198.51.100.7/32', '2001:db8::/32'], []],
    },
    api_endpoint: { type: ['string', 'null'], examples: ['https://api.demo.example.com:443'] },
    state: { type: 'string', enum: [...CLUSTER_STATES] },
    reason: { type: ['string', 'null'] },
    last_applied_at: { type: ['string', 'null'], format: 'date-time' },
    backend: {
      type: ['string', 'null'],
      description: 'The HAProxy backend serving the host (with map routing a slot, which names no cluster)',
      examples: ['kubebyon_slot_00042'],
    },
    servers: {
      type: 'array',
      items: { type: 'string' },
      description: "The backend's servers, address:port",
      examples: [['10.0.0.1:31443']],
    },
    instances: {
      type: 'array',
      description:
        "With several HAProxy instances (or on a standby replica, as the leader published it): each one's state; " +
        'the cluster is applied only when every instance is, and `reason` names the instances behind',
      items: {
        type: 'object',
        properties: {
          name: { type: 'string' },
          state: { type: 'string', enum: [...CLUSTER_STATES] },
          reason: { type: ['string', 'null'] },
          last_applied_at: { type: ['string', 'null'], format: 'date-time' },
        },
        required: ['name', 'state'],
      },
    },
  },
  required: [
    'name',
    'host',
    'authorized_networks',
    'api_endpoint',
    'state',
    'reason',
    'last_applied_at',
    'backend',
    'servers',
  ],
};

const Readiness = {
  type: 'object',
  properties: {
    ready: { type: 'boolean' },
    checks: {
      type: 'object',
      additionalProperties: {
        type: 'object',
        properties: { ok: { type: 'boolean' }, detail: { type: 'string' } },
        required: ['ok'],
      },
      examples: [
        { state: { ok: true }, haproxy: { ok: false, detail: 'connect ECONNREFUSED 10.0.0.5:5555' } },
      ],
    },
  },
  required: ['ready', 'checks'],
};

const responses = (ok: Record<string, unknown>) => ({
  ...ok,
  '400': {
    description: 'Malformed request: the field and reason are named',
    content: { 'application/json': { schema: ErrorBody } },
  },
  '401': {
    description: 'Missing or bad credentials',
    content: { 'application/json': { schema: ErrorBody } },
  },
  '422': {
    description:
      'Well-formed but refused by the routing rules; nothing is stored. For authorized_networks, `field` names ' +
      'the entry (authorized_networks.3, or clusters.0.authorized_networks.3 in a full set) and `reason` is one of ' +
      `${NETWORK_REJECTIONS.join(', ')}`,
    content: { 'application/json': { schema: ErrorBody } },
  },
});

// Answers about the request body, given before a handler runs.
const bodyResponses = {
  '408': {
    description: 'The body was not received in time',
    content: { 'application/json': { schema: ErrorBody } },
  },
  '413': {
    description: 'The body (declared or sent) is over the limit; answered before reading it',
    content: { 'application/json': { schema: ErrorBody } },
  },
  '415': {
    description:
      'Content-Encoding other than identity, gzip, deflate or br, or a Content-Type other than application/json (UTF-8)',
    content: { 'application/json': { schema: ErrorBody } },
  },
  '503': {
    description:
      'Unverified bodies being received hold all the room allowed and this one was the oldest (busy; retry after the Retry-After header), or the call could not be recorded on disk or in the Kubernetes API (state_unavailable)',
    content: { 'application/json': { schema: ErrorBody } },
  },
};

// A signed write older than, or the same as, the one a shared store holds for the cluster (replicas).
const staleWrite = {
  '409': {
    description:
      'stale_write: a change signed at the same time or later is stored for this cluster (a replay sent to another replica); nothing changed',
    content: { 'application/json': { schema: ErrorBody } },
  },
};

const wait = {
  name: 'wait',
  in: 'query',
  required: false,
  schema: { type: 'boolean' },
  description: 'Answer only once the change is applied or failed (bounded by the service timeout).',
};
const name = { name: 'name', in: 'path', required: true, schema: { type: 'string', maxLength: 253 } };
const json = (s: unknown) => ({ 'application/json': { schema: s } });

/** The webhook API's OpenAPI 3.1 document, served at /openapi.json; request schemas come from the validators. */
export function openApiDocument(version: string) {
  return {
    openapi: '3.1.0',
    info: {
      title: 'kubebyon-haproxy-adapter webhook API',
      version,
      description:
        'Every /v1 call is authenticated: X-Kubebyon-Timestamp (unix seconds) and X-Kubebyon-Signature ' +
        '(sha256=hex HMAC-SHA256 of "<timestamp>\\n<METHOD>\\n<path?query>\\n<body>" with the shared secret), ' +
        'or a bearer token when the service runs with KUBEBYON_WEBHOOK_AUTH=bearer.',
    },
    components: {
      securitySchemes: {
        signature: { type: 'apiKey', in: 'header', name: 'X-Kubebyon-Signature' },
        bearer: { type: 'http', scheme: 'bearer' },
      },
    },
    security: [{ signature: [] }, { bearer: [] }],
    paths: {
      '/v1/clusters': {
        get: {
          summary: 'Every cluster with its state and api_endpoint',
          responses: responses({
            '200': {
              description: 'Clusters',
              content: json({
                type: 'object',
                properties: { clusters: { type: 'array', items: ClusterStatus } },
              }),
            },
          }),
        },
        put: {
          summary: 'Replace the full desired set; clusters not in it are removed',
          parameters: [wait],
          requestBody: { required: true, content: json(schema(ClusterSetBody)) },
          responses: responses({
            '202': { description: 'Accepted and stored' },
            '200': { description: 'Applied (wait=true)' },
            ...bodyResponses,
            ...staleWrite,
          }),
        },
      },
      '/v1/clusters/{name}': {
        get: {
          summary: 'One cluster',
          parameters: [name],
          responses: responses({
            '200': { description: 'The cluster', content: json(ClusterStatus) },
            '404': { description: 'Unknown cluster' },
          }),
        },
        put: {
          summary:
            'Create or update one cluster; a public_access_mode other than loadbalancer removes its route',
          parameters: [name, wait],
          requestBody: { required: true, content: json(schema(ClusterBody)) },
          responses: responses({
            '202': { description: 'Accepted and stored', content: json(ClusterStatus) },
            '200': { description: 'Applied (wait=true)', content: json(ClusterStatus) },
            ...bodyResponses,
            ...staleWrite,
          }),
        },
        delete: {
          summary: 'Remove one cluster',
          parameters: [name, wait],
          responses: responses({ '202': { description: 'Removed from the desired state' }, ...staleWrite }),
        },
      },
      '/v1/plan': {
        get: {
          summary: 'The changes the next reconcile would apply, without applying them',
          responses: responses({
            '200': {
              description:
                'The plan as text and JSON, and routes: each cluster with its host, backend and servers after it',
            },
            '503': {
              description:
                'topology_not_synced: the topology has not been read yet; not_leader: a standby replica (only the leader reads HAProxy)',
              content: json(ErrorBody),
            },
          }),
        },
      },
      '/v1/reconcile': {
        post: {
          summary: 'Reconcile now',
          parameters: [wait],
          responses: responses({
            '202': { description: 'Started' },
            '200': { description: 'Done (wait=true)' },
          }),
        },
      },
      '/v1/readyz': {
        get: {
          summary:
            'Readiness with the reason of each failed check (unauthenticated /readyz gives only the verdicts)',
          responses: {
            '200': { description: 'Ready', content: json(Readiness) },
            '503': { description: 'Not ready', content: json(Readiness) },
            '401': { description: 'Missing or bad credentials', content: json(ErrorBody) },
          },
        },
      },
    },
  };
}
