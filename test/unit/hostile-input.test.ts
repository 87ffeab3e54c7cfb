import { join } from 'node:path';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isAllowKey } from '../../src/haproxy/allow-keys.js';
import type { Plan } from '../../src/plan/plan.js';
import { renderOwnedFile } from '../../src/providers/haproxy/owned-file.js';
import { MemoryProvider } from '../../src/providers/memory/memory-provider.js';
import type { ApplyReport, Change } from '../../src/providers/provider.js';
import { validateEndpoint } from '../../src/routes/endpoint.js';
import { validateHost } from '../../src/routes/host.js';
import { formatNetwork, validateNetworks } from '../../src/routes/networks.js';
import { validateClusterName } from '../../src/routes/route.js';
import { ClusterStore } from '../../src/store/cluster-store.js';
import { StaticTopology } from '../../src/topology/topology.js';
import { sign } from '../../src/webhook/auth.js';
import { startWebhookApp, TEST_SECRET, type WebhookApp } from '../support/webhook-app.js';

// Thousands of generated requests against the real webhook app (in-memory provider): random and adversarial
// hosts, names, ports and bodies. Never a 5xx; a refused request changes neither the store nor HAProxy; and
// every string that reaches a provider passes the validators it would have to pass to get there.

const NODES = ['127.0.0.1', '::1'];
const FRONTEND = 'kubebyon_sni';
const BACKEND_NAME = /^kubebyon_slot_[0-9]{5,}$/;
const SERVER_NAME = /^srv[1-9][0-9]{0,5}$/;
const RUNS = 50;
const PER_RUN = 210;
const CONCURRENCY = 12;

/** The memory provider, checking every object name, host and address of every plan it is given. */
class CheckingProvider extends MemoryProvider {
  violations: string[] = [];
  private flag(what: string, value: unknown) {
    this.violations.push(`${what}: ${JSON.stringify(value)}`);
  }
  private checkHost(host: string) {
    const v = validateHost(host);
    if (!v.ok || v.host !== host) this.flag('host', host);
  }
  override async apply(plan: Plan, change: Change, signal: AbortSignal): Promise<ApplyReport> {
    for (const op of plan.operations) {
      switch (op.kind) {
        case 'create_frontend':
        case 'update_frontend':
          if (op.frontend.name !== FRONTEND) this.flag('frontend', op.frontend.name);
          break;
        case 'delete_frontend':
          this.flag('frontend deleted', op.name);
          break;
        case 'create_backend':
          if (!BACKEND_NAME.test(op.backend.name) && op.backend.name !== 'kubebyon_refusals')
            this.flag('backend', op.backend.name);
          break;
        case 'delete_backend':
          if (!BACKEND_NAME.test(op.name)) this.flag('backend', op.name);
          break;
        case 'create_server':
        case 'update_server':
        case 'delete_server': {
          if (!BACKEND_NAME.test(op.backend)) this.flag('backend', op.backend);
          const s = op.server;
          if (!SERVER_NAME.test(s.name)) this.flag('server', s.name);
          if (!validateEndpoint(s.address, s.port).ok || !NODES.includes(s.address))
            this.flag('address', `${s.address}:${s.port}`);
          break;
        }
        case 'set_switching_rules':
          this.flag('rules of', op.frontend);
          break;
        case 'set_map_entry':
          this.checkHost(op.host);
          if (!BACKEND_NAME.test(op.backend)) this.flag('map entry backend', op.backend);
          if (!validateClusterName(op.cluster).ok) this.flag('map entry cluster', op.cluster);
          break;
        case 'delete_map_entry':
          this.checkHost(op.host);
          break;
        case 'add_allow_entry':
        case 'delete_allow_entry':
          if (!isAllowKey(op.key)) this.flag('allow key', op.key);
          break;
      }
    }
    const report = await super.apply(plan, change, signal);
    // What the stock provider would write for this state: it refuses any value that could inject syntax.
    try {
      renderOwnedFile(this.state, undefined, '/etc/haproxy');
    } catch (err) {
      this.flag('owned file', String(err));
    }
    return report;
  }
}

// ---- generators ---------------------------------------------------------------------------------------

const label = fc.stringMatching(/^[a-z0-9](?:[a-z0-9-]{0,8}[a-z0-9])?$/);
const validHost = fc
  .tuple(fc.array(label, { minLength: 1, maxLength: 3 }), fc.stringMatching(/^[a-z]{2,6}$/))
  .map(([ls, tld]) => [...ls, tld].join('.'));
// Things that must never reach haproxy.cfg: HAProxy syntax, control characters, look-alikes, encodings.
const POISON = [
  ' ',
  '\t',
  '\n',
  '\r',
  '\r\n',
  '\0',
  '\x01',
  '\x1b',
  '\x7f',
  '}',
  '{',
  '#',
  '%[',
  '%[src]',
  '\\',
  '"',
  "'",
  ';',
  '$',
  '`',
  '|',
  '&',
  '<',
  '*',
  '?',
  ',',
  '/',
  ':',
  '@',
  '=',
  '_',
  '..',
  '-.',
  '.-',
  '\u00a0',
  '\u2028',
  '\u200b',
  '\u202e',
  '\ufeff',
  'é',
  'ı',
  'İ',
  '\u212a', // KELVIN SIGN, lower-cases to k
  'ſ', // LONG S, upper-cases to S
  'ａ', // FULLWIDTH a
  'а', // CYRILLIC a
  'ο', // GREEK omicron
  '\ud800', // a lone surrogate
  '😀',
  ' if TRUE',
  '\nbackend evil\n  server x 10.0.0.1:80',
  '} use_backend x if TRUE #',
];
const poison = fc.constantFrom(...POISON);
const poisoned = (base: fc.Arbitrary<string>) =>
  fc
    .tuple(base, poison, fc.nat())
    .map(([s, p, at]) => `${s.slice(0, at % (s.length + 1))}${p}${s.slice(at % (s.length + 1))}`);
const IDN_LOOKALIKES = [
  'аpple.com',
  'pаypal.com',
  'gооgle.com',
  'ɢoogle.com',
  'xn--pple-43d.com',
  'ＡＰＩ.example.com',
];
const octet = fc.integer({ min: 0, max: 255 });
const ipLiteral = fc.oneof(
  fc.ipV4(),
  fc.ipV4Extended(),
  fc.ipV6(),
  fc.integer({ min: 0, max: 2 ** 32 - 1 }).map(String),
  fc.integer({ min: 0, max: 2 ** 32 - 1 }).map((n) => `0x${n.toString(16)}`),
  fc.integer({ min: 0, max: 2 ** 32 - 1 }).map((n) => `0X${n.toString(16).toUpperCase()}`),
  fc.tuple(octet, octet, octet, octet).map((o) => o.map((x) => `0x${x.toString(16)}`).join('.')),
  fc.tuple(octet, octet, octet, octet).map((o) => o.map((x) => `0${x.toString(8)}`).join('.')),
  fc.tuple(octet, fc.integer({ min: 0, max: 2 ** 24 - 1 })).map(([a, b]) => `${a}.${b}`),
  fc.tuple(octet, octet, fc.integer({ min: 0, max: 65535 })).map(([a, b, c]) => `${a}.${b}.${c}`),
  fc.ipV6().map((a) => `[${a}]`),
  fc.tuple(fc.ipV6(), fc.constantFrom('eth0', '1', 'lo', '25eth0', 'x y')).map(([a, z]) => `${a}%${z}`),
  fc.tuple(fc.ipV6(), fc.constantFrom('eth0', '25eth0')).map(([a, z]) => `[${a}%${z}]`),
  fc.ipV4().map((a) => `::ffff:${a}`),
  fc.ipV4().map((a) => `${a}.`),
  fc.constantFrom(
    '127.1',
    '127.0.1',
    '0x7f.1',
    '0177.1',
    '2130706433',
    '0',
    '0x',
    '::',
    '::1',
    'example.127',
  ),
);
// Names around the 253-character limit, with and without the trailing dot SNI never carries.
const longHost = fc.tuple(fc.integer({ min: 249, max: 256 }), fc.boolean()).map(([length, dot]) => {
  const labels: string[] = [];
  let size = -1;
  while (size + 1 + 63 <= length - 4) {
    labels.push('a'.repeat(63));
    size += 64;
  }
  labels.push('b'.repeat(Math.max(1, length - 4 - size - 1)), 'com');
  const host = labels.join('.');
  return dot ? `${host}.` : host;
});
const hostArb = fc.oneof(
  { weight: 6, arbitrary: validHost },
  { weight: 2, arbitrary: fc.mixedCase(validHost) },
  { weight: 1, arbitrary: validHost.map((h) => `${h}.`) },
  { weight: 1, arbitrary: validHost.map((h) => `${h}..`) },
  { weight: 6, arbitrary: poisoned(validHost) },
  { weight: 3, arbitrary: ipLiteral },
  { weight: 1, arbitrary: fc.constantFrom(...IDN_LOOKALIKES) },
  { weight: 2, arbitrary: longHost },
  { weight: 2, arbitrary: fc.string({ unit: 'binary', maxLength: 40 }) },
  { weight: 1, arbitrary: fc.string({ maxLength: 300 }) },
);

const validName = fc.stringMatching(/^[a-z0-9](?:[a-z0-9._-]{0,10}[a-z0-9])?$/);
/** Raw path segments: percent-encoding is left to the URL parser, except where it is the point. */
const nameSegment = fc.oneof(
  { weight: 8, arbitrary: validName },
  { weight: 3, arbitrary: poisoned(validName) },
  {
    weight: 2,
    arbitrary: fc.constantFrom(
      '%',
      '%zz',
      '%2F',
      'a%2Fb',
      '%00',
      'a%00b',
      '%C0%AF',
      '%E2%80%AE',
      '%ff',
      '..',
      '.',
      '%2e%2e',
      'a%20b',
      'A'.repeat(253),
      'a'.repeat(254),
      'x'.repeat(300),
      '-a',
      'a-',
      '_a',
    ),
  },
  { weight: 1, arbitrary: fc.string({ unit: 'binary', minLength: 1, maxLength: 20 }) },
);

const portArb = fc.oneof(
  { weight: 6, arbitrary: fc.integer({ min: 1, max: 65535 }) },
  {
    weight: 3,
    arbitrary: fc.constantFrom(0, -1, 65536, 1.5, 1e308, -0, 2 ** 53, 31443.0000001, '31443', '', 'https'),
  },
  { weight: 1, arbitrary: fc.jsonValue({ maxDepth: 2 }) },
);
const portName = fc.oneof(
  fc.integer({ min: 1, max: 65535 }),
  fc.stringMatching(/^[a-z][a-z0-9]{0,14}$/),
  fc.constantFrom('80', 'HTTPS', 'a--b', '-a', 'a-', 'abcdefghijklmnop', 'é', 'a b', 0, 65536),
);
const dnsLabelish = fc.oneof(label, poisoned(label), fc.constantFrom('', 'A', 'a'.repeat(64)));
const serviceArb = fc.oneof(
  { weight: 4, arbitrary: fc.record({ namespace: dnsLabelish, name: dnsLabelish, port: portName }) },
  {
    weight: 1,
    arbitrary: fc.record({
      namespace: label,
      name: label,
      port: portName,
      extra: fc.jsonValue({ maxDepth: 1 }),
    }),
  },
  { weight: 1, arbitrary: fc.jsonValue({ maxDepth: 2 }) },
);
const modeArb = fc.oneof(
  { weight: 10, arbitrary: fc.constant('loadbalancer') },
  {
    weight: 2,
    arbitrary: fc.constantFrom('LoadBalancer', 'nodeport', 'none', '', 'loadbalancer ', 'ingress'),
  },
  { weight: 1, arbitrary: fc.jsonValue({ maxDepth: 1 }) },
);
// Authorized networks: valid ones in every spelling, and everything a list must refuse.
const v4Network = fc
  .tuple(fc.integer({ min: 0, max: 2 ** 32 - 1 }), fc.integer({ min: 0, max: 32 }), fc.boolean())
  .map(([n, prefix, bare]) => {
    const bits = BigInt(n) & ~((1n << BigInt(32 - prefix)) - 1n);
    const text = formatNetwork({ family: 4, bits, prefix });
    return bare && prefix === 32 ? text.slice(0, -3) : text;
  });
const v6Word = fc.oneof(fc.constant(0), fc.integer({ min: 0, max: 0xffff }));
const v6Network = fc
  .tuple(fc.array(v6Word, { minLength: 8, maxLength: 8 }), fc.integer({ min: 0, max: 128 }), fc.boolean())
  .map(([words, prefix, upper]) => {
    const all = words.reduce((n, w) => (n << 16n) | BigInt(w), 0n);
    const bits = all & ~((1n << BigInt(128 - prefix)) - 1n);
    const text = formatNetwork({ family: 6, bits, prefix });
    return upper ? text.toUpperCase() : text;
  });
const validNetwork = fc.oneof(v4Network, v6Network);
const badNetwork = fc.oneof(
  poisoned(validNetwork),
  ipLiteral,
  fc.tuple(fc.ipV4(), fc.integer({ min: 0, max: 31 })).map(([a, p]) => `${a.replace(/\.\d+$/, '.1')}/${p}`),
  fc
    .tuple(v4Network, fc.constantFrom('/33', '/-1', '/08', '/', '/1000', '/8/8', ' '))
    .map(([n, p]) => `${n.split('/')[0]}${p}`),
  fc.ipV4().map((a) => `::ffff:${a}`),
  fc.ipV4().map(
    (a) =>
      `${a
        .split('.')
        .map((o) => o.padStart(3, '0'))
        .join('.')}`,
  ),
  fc.constantFrom('', '::/129', 'fe80::1%eth0', '10.0.0.1/32\n', 'any', '*', '0/0', 'x'.repeat(300)),
  fc.string({ maxLength: 20 }),
);
const validList = fc.array(validNetwork, { maxLength: 6 });
const networksArb = fc.oneof(
  { weight: 5, arbitrary: validList },
  { weight: 3, arbitrary: fc.array(fc.oneof(validNetwork, badNetwork), { minLength: 1, maxLength: 6 }) },
  // The same network twice, once as written and once canonical (or bare and /32).
  { weight: 1, arbitrary: v4Network.map((n) => (n.includes('/') ? [n, n] : [n, `${n}/32`])) },
  { weight: 1, arbitrary: v6Network.map((n) => [n, n.toLowerCase()]) },
  {
    weight: 1,
    arbitrary: fc
      .integer({ min: 62, max: 70 })
      .map((n) => Array.from({ length: n }, (_, i) => `10.${i >> 8}.${i & 255}.0/24`)),
  },
  { weight: 1, arbitrary: fc.constantFrom(null, []) },
  { weight: 1, arbitrary: fc.jsonValue({ maxDepth: 2 }) },
  { weight: 1, arbitrary: fc.array(fc.jsonValue({ maxDepth: 1 }), { minLength: 1, maxLength: 3 }) },
);
const clusterBody = fc
  .record(
    {
      control_plane_host: fc.oneof(
        { weight: 9, arbitrary: hostArb },
        { weight: 1, arbitrary: fc.jsonValue() },
      ),
      public_access_mode: modeArb,
      service: serviceArb,
      node_port: portArb,
      authorized_networks: networksArb,
    },
    { requiredKeys: [] },
  )
  .chain((b) =>
    fc.oneof(
      { weight: 8, arbitrary: fc.constant(b) },
      // Extra fields, including the ones that reach prototypes in careless code.
      {
        weight: 2,
        arbitrary: fc
          .dictionary(
            fc.oneof(fc.string({ maxLength: 10 }), fc.constantFrom('__proto__', 'constructor', 'prototype')),
            fc.jsonValue({ maxDepth: 2 }),
            { minKeys: 1, maxKeys: 3 },
          )
          .map((extra) => ({ ...b, ...extra })),
      },
    ),
  );
// Mostly routable bodies, so that accepted changes interleave with refused ones.
const goodBody = fc.record(
  {
    control_plane_host: fc.oneof(validHost, fc.mixedCase(validHost)),
    public_access_mode: fc.constant('loadbalancer'),
    node_port: fc.integer({ min: 30000, max: 32767 }),
    authorized_networks: validList.filter((l) => validateNetworks(l).ok),
  },
  { requiredKeys: ['control_plane_host', 'public_access_mode', 'node_port'] },
);

type Body = { json: unknown } | { raw: Buffer; note: string };

const deep = (n: number, open: string, close: string, inner = '1') =>
  `${open.repeat(n)}${inner}${close.repeat(n)}`;
const rawBody = fc.oneof(
  fc
    .integer({ min: 1, max: 120_000 })
    .map((n) => ({ raw: Buffer.from(deep(n, '[', ']')), note: 'deep array' })),
  fc
    .integer({ min: 1, max: 60_000 })
    .map((n) => ({ raw: Buffer.from(deep(n, '{"a":', '}')), note: 'deep object' })),
  fc.integer({ min: 1, max: 60_000 }).map((n) => ({
    raw: Buffer.from(
      `{"control_plane_host":${deep(n, '[', ']', '"a.example.com"')},"public_access_mode":"loadbalancer","node_port":30000}`,
    ),
    note: 'deep host',
  })),
  fc.integer({ min: 20_000, max: 25_000 }).map((n) => ({
    raw: Buffer.from(`{"clusters":[${Array(n).fill('{}').join(',')}]}`),
    note: 'huge cluster array',
  })),
  fc.integer({ min: 1000, max: 150_000 }).map((n) => ({
    raw: Buffer.from(
      `{"control_plane_host":"a.example.com","public_access_mode":"loadbalancer","node_port":[${Array(n).fill('0').join(',')}]}`,
    ),
    note: 'huge number array',
  })),
  fc
    .tuple(
      fc.constantFrom('control_plane_host', 'public_access_mode'),
      fc.constantFrom(
        [0xff],
        [0xc0, 0xaf],
        [0x80],
        [0xe2, 0x82],
        [0xed, 0xa0, 0x80],
        [0xf8, 0x88, 0x80, 0x80, 0x80],
      ),
      validHost,
    )
    .map(([field, bytes, host]) => {
      const body = { control_plane_host: host, public_access_mode: 'loadbalancer', node_port: 30001 };
      // The bad bytes go inside one string value; the rest is valid JSON.
      const [before = '', after = ''] = JSON.stringify({
        ...body,
        [field]: `${body[field].slice(0, 2)}\u0001${body[field].slice(2)}`,
      }).split('\\u0001');
      return {
        raw: Buffer.concat([Buffer.from(before), Buffer.from(bytes), Buffer.from(after)]),
        note: 'invalid UTF-8',
      };
    }),
  fc
    .constantFrom(
      '',
      'null',
      'true',
      '"loadbalancer"',
      '{',
      '{"control_plane_host":',
      '{}garbage',
      '\ufeff{"control_plane_host":"a.example.com","public_access_mode":"loadbalancer","node_port":30000}',
      '{"control_plane_host":"a.example.com","control_plane_host":"127.0.0.1","public_access_mode":"loadbalancer","node_port":30000}',
      '{"control_plane_host":"a.example.com","public_access_mode":"loadbalancer","node_port":30000,"__proto__":{"node_port":1}}',
      'control_plane_host=a.example.com&public_access_mode=loadbalancer&node_port=30000',
      '<xml/>',
      '{"control_plane_host":"a.example.com","public_access_mode":"loadbalancer","node_port":1e999}',
      '{"control_plane_host":"a.example.com","public_access_mode":"loadbalancer","node_port":NaN}',
    )
    .map((s) => ({ raw: Buffer.from(s), note: 'malformed' })),
);
const CONTENT_TYPES = [
  'text/plain',
  'text/plain;charset=UTF-8',
  'application/x-www-form-urlencoded',
  'multipart/form-data; boundary=x',
  'application/json; charset=latin1',
  'application/json; charset=utf-16',
  'application/xml',
  'text/json',
  'application/merge-patch+json',
  'application/json, text/plain',
];
const contentType = fc.oneof(
  { weight: 12, arbitrary: fc.constant('application/json') },
  { weight: 1, arbitrary: fc.constantFrom('application/json; charset=utf-8', 'Application/JSON', '') },
  { weight: 3, arbitrary: fc.constantFrom(...CONTENT_TYPES) },
);
const queryArb = fc.oneof(
  { weight: 8, arbitrary: fc.constant('') },
  {
    weight: 1,
    arbitrary: fc.constantFrom(
      '?wait=false',
      '?wait=TRUE',
      '?wait=true&wait=true',
      '?%zz',
      '?x=%00',
      '?a[b]=c',
    ),
  },
);

interface Req {
  method: string;
  /** The raw segment after /v1/clusters/, or null for /v1/clusters itself. */
  segment: string | null;
  query: string;
  body: Body | null;
  contentType: string;
}

const itemBody = fc.oneof(
  { weight: 4, arbitrary: fc.tuple(validName, goodBody).map(([name, b]) => ({ name, ...b })) },
  { weight: 1, arbitrary: fc.tuple(nameSegment, clusterBody).map(([name, b]) => ({ name, ...b })) },
);
const reqArb: fc.Arbitrary<Req> = fc.oneof(
  {
    weight: 10,
    arbitrary: fc.record({
      method: fc.constant('PUT'),
      segment: nameSegment,
      query: queryArb,
      body: fc
        .oneof(
          { weight: 5, arbitrary: clusterBody },
          { weight: 3, arbitrary: goodBody },
          // A routable body whose only fault, if any, is its list: the network rules themselves get tried.
          {
            weight: 2,
            arbitrary: fc
              .tuple(goodBody, networksArb)
              .map(([b, authorized_networks]) => ({ ...b, authorized_networks })),
          },
        )
        .map((json): Body => ({ json })),
      contentType,
    }),
  },
  {
    weight: 2,
    arbitrary: fc.record({
      method: fc.constantFrom('PUT', 'POST', 'PATCH', 'DELETE'),
      segment: fc.oneof(nameSegment, fc.constant(null)),
      query: queryArb,
      body: fc.oneof(
        rawBody,
        fc.jsonValue().map((json) => ({ json })),
      ),
      contentType,
    }),
  },
  {
    weight: 2,
    arbitrary: fc.record({
      method: fc.constantFrom('DELETE', 'GET'),
      segment: nameSegment,
      query: queryArb,
      body: fc.constant(null),
      contentType: fc.constant(''),
    }),
  },
  {
    weight: 1,
    arbitrary: fc.record({
      method: fc.constant('PUT'),
      segment: fc.constant(null),
      query: queryArb,
      body: fc.array(itemBody, { maxLength: 6 }).map((clusters): Body => ({ json: { clusters } })),
      contentType,
    }),
  },
);

// ---- the model of what the store must hold ----------------------------------------------------------

type Entry = { host: string; target: unknown; networks: string[] };
type Route = { kind: 'item'; name: string } | { kind: 'collection' } | { kind: 'other' };

// As express routes it: one trailing slash is ignored, :name is percent-decoded.
function routeOf(pathname: string): Route {
  const p = pathname.endsWith('/') ? pathname.slice(0, -1) : pathname;
  if (p === '/v1/clusters') return { kind: 'collection' };
  const m = /^\/v1\/clusters\/([^/]+)$/.exec(p);
  if (!m?.[1]) return { kind: 'other' };
  try {
    return { kind: 'item', name: decodeURIComponent(m[1]) };
  } catch {
    return { kind: 'other' };
  }
}

function entryOf(b: Record<string, unknown>): Entry | null {
  if (b.public_access_mode !== 'loadbalancer') return null;
  const v = validateHost(String(b.control_plane_host));
  if (!v.ok) throw new Error(`accepted an invalid host ${JSON.stringify(b.control_plane_host)}`);
  const listed = b.authorized_networks ?? [];
  if (!Array.isArray(listed)) throw new Error(`accepted authorized_networks ${JSON.stringify(listed)}`);
  const networks = validateNetworks(listed);
  if (!networks.ok)
    throw new Error(`accepted an invalid list ${JSON.stringify(listed).slice(0, 200)}: ${networks.reason}`);
  return {
    host: v.host,
    target: b.service ? { service: b.service } : { nodePort: b.node_port },
    networks: networks.networks,
  };
}

/** The change a request accepted with 202 must have made. */
function applyAccepted(model: Map<string, Entry>, req: Req, route: Route): void {
  // A DELETE names its cluster in the (signed) path; a body it carries means nothing.
  if (route.kind === 'item' && req.method === 'DELETE') {
    model.delete(route.name);
    return;
  }
  if (req.body && 'raw' in req.body) throw new Error(`accepted a ${req.body.note} body`);
  // Only JSON is taken: a body sent as a form or as text is not what the caller signed up to send.
  if (req.body && CONTENT_TYPES.includes(req.contentType))
    throw new Error(`accepted a body sent as ${req.contentType}`);
  const json = req.body ? (req.body.json as Record<string, unknown>) : undefined;
  if (route.kind === 'item' && req.method === 'DELETE') {
    model.delete(route.name);
  } else if (route.kind === 'item' && req.method === 'PUT' && json) {
    const e = entryOf(json);
    if (e) model.set(route.name, e);
    else model.delete(route.name);
  } else if (route.kind === 'collection' && req.method === 'PUT' && json) {
    model.clear();
    for (const item of json.clusters as Array<Record<string, unknown>>) {
      const e = entryOf(item);
      if (e) model.set(String(item.name), e);
    }
  } else if (req.method !== 'GET' && !(route.kind === 'other' || req.method === 'POST')) {
    throw new Error(`accepted ${req.method} ${route.kind} without a JSON body`);
  }
}

const project = (
  records: Array<{ name: string; host: string; target: unknown; authorizedNetworks?: string[] | undefined }>,
) =>
  Object.fromEntries(
    [...records]
      .sort((a, b) => (a.name < b.name ? -1 : 1))
      .map((r) => {
        // An open cluster's record has no list at all: an empty one would be a second spelling of it.
        if (r.authorizedNetworks?.length === 0) throw new Error(`${r.name} stored an empty list`);
        return [r.name, { host: r.host, target: r.target, networks: r.authorizedNetworks ?? [] }];
      }),
  );

describe('hostile input to the webhook', () => {
  let app: WebhookApp;
  let provider: CheckingProvider;
  const statuses = new Map<number, number>();
  let sent = 0;
  let accepted = 0;
  const networkRefusals = new Map<string, number>();
  let listsStored = 0;
  const serverErrors: string[] = [];

  beforeAll(async () => {
    provider = new CheckingProvider();
    app = await startWebhookApp({
      provider,
      topology: new StaticTopology(NODES),
      bodyLimitBytes: 1024 * 1024,
    });
  });
  afterAll(async () => {
    await app?.stop();
  });

  async function send(req: Req): Promise<{ status: number; route: Route; text: string }> {
    const url = new URL(
      `${app.base}/v1/clusters${req.segment === null ? '' : `/${req.segment}`}${req.query}`,
    );
    const path = `${url.pathname}${url.search}`;
    const raw =
      req.body === null
        ? Buffer.alloc(0)
        : 'raw' in req.body
          ? req.body.raw
          : Buffer.from(JSON.stringify(req.body.json) ?? '');
    const ts = String(Math.floor(Date.now() / 1000));
    const headers: Record<string, string> = {
      'x-kubebyon-timestamp': ts,
      // Identical writes within one second are replays (401): the model counts only what got 202.
      'x-kubebyon-signature': sign(TEST_SECRET, ts, req.method, path, raw),
    };
    if (req.contentType) headers['content-type'] = req.contentType;
    const res = await fetch(url, {
      method: req.method,
      headers,
      ...(raw.length > 0 && req.method !== 'GET' ? { body: raw } : {}),
    });
    const text = await res.text();
    return { status: res.status, route: routeOf(url.pathname), text };
  }

  /** Batches of requests that cannot affect the same cluster, so that the model does not depend on order. */
  function batches(reqs: Req[]): Req[][] {
    const out: Array<{ keys: Set<string>; reqs: Req[] }> = [];
    for (const req of reqs) {
      const url = new URL(`http://x/v1/clusters${req.segment === null ? '' : `/${req.segment}`}`);
      const route = routeOf(url.pathname);
      const key =
        route.kind === 'item' ? `n:${route.name}` : route.kind === 'collection' ? '*' : `o:${out.length}`;
      const last = out[out.length - 1];
      const clash =
        !last ||
        last.reqs.length >= CONCURRENCY ||
        last.keys.has(key) ||
        last.keys.has('*') ||
        (key === '*' && last.reqs.length > 0);
      if (clash) out.push({ keys: new Set([key]), reqs: [req] });
      else {
        last.keys.add(key);
        last.reqs.push(req);
      }
    }
    return out.map((b) => b.reqs);
  }

  it(`never answers 5xx, and changes nothing for a refused request (${RUNS * PER_RUN} requests)`, async () => {
    const outcome = await fc.check(
      fc.asyncProperty(fc.array(reqArb, { minLength: PER_RUN, maxLength: PER_RUN }), async (reqs) => {
        const model = new Map(Object.entries(project(app.store.list())) as Array<[string, Entry]>);
        for (const batch of batches(reqs)) {
          const results = await Promise.all(batch.map((r) => send(r)));
          results.forEach((res, i) => {
            const req = batch[i] as Req;
            sent++;
            statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1);
            if (res.status === 422 || res.status === 400) {
              const answer = JSON.parse(res.text);
              const key = `${res.status} ${answer.reason}`;
              if (String(answer.field).includes('authorized_networks'))
                networkRefusals.set(key, (networkRefusals.get(key) ?? 0) + 1);
            }
            if (res.status >= 500)
              serverErrors.push(`${req.method} ${req.segment} ${res.status} ${res.text.slice(0, 200)}`);
            if (res.status === 202) {
              accepted++;
              try {
                applyAccepted(model, req, res.route);
              } catch (err) {
                const body = req.body && 'json' in req.body ? JSON.stringify(req.body.json) : req.body?.note;
                throw new Error(
                  `${req.method} ${JSON.stringify(req.segment)}${req.query} (${req.contentType}) ${String(body).slice(0, 300)}: ${(err as Error).message}`,
                );
              }
            } else if (res.status >= 200 && res.status < 300 && req.method !== 'GET') {
              throw new Error(`unexpected ${res.status} for ${req.method}`);
            }
          });
          expect(serverErrors).toEqual([]);
          expect(project(app.store.list())).toEqual(
            Object.fromEntries([...model].sort(([a], [b]) => (a < b ? -1 : 1))),
          );
        }
        // The disk (snapshot and journal) agrees with memory: what was acknowledged is on disk, and nothing else.
        const onDisk = await ClusterStore.read(join(app.dir, 'state.json'));
        expect(project(onDisk)).toEqual(project(app.store.list()));
        listsStored += app.store.list().filter((r) => r.authorizedNetworks).length;
        // HAProxy (the provider) holds exactly the hosts of the accepted clusters.
        const pass = await app.reconciler.request('check');
        expect(pass.ok).toBe(true);
        const sniMap = provider.state.frontends.find((f) => f.name === FRONTEND)?.sniMap;
        const entries = provider.state.maps?.find((m) => m.name === sniMap)?.entries ?? new Map();
        expect(new Set(entries.keys())).toEqual(new Set([...model.values()].map((e) => e.host)));
        expect(provider.violations).toEqual([]);
      }),
      { numRuns: RUNS, seed: Number(process.env.KUBEBYON_TEST_SEED ?? 20260112), endOnFailure: true },
    );
    // The counterexample is megabytes of generated bodies: report the error, the seed and the path only.
    if (outcome.failed)
      throw new Error(
        `${String(outcome.errorInstance).slice(0, 3000)} (seed ${outcome.seed}, path ${outcome.counterexamplePath})`,
      );
    console.log(
      `[measure] hostile input: ${sent} requests, ${accepted} accepted, statuses ${JSON.stringify(Object.fromEntries(statuses))}, ${provider.applies.length} plans applied; authorized_networks refused ${JSON.stringify(Object.fromEntries(networkRefusals))}, clusters with a list after each run ${listsStored}`,
    );
    // The list rules were tried, every one of them, and lists were stored.
    for (const reason of [
      'network_invalid',
      'network_prefix_invalid',
      'network_host_bits_set',
      'network_ipv4_mapped',
      'network_duplicate',
      'too_many_networks',
      'invalid_type',
    ])
      expect(
        networkRefusals.get(`${reason === 'invalid_type' ? 400 : 422} ${reason}`) ?? 0,
        reason,
      ).toBeGreaterThan(5);
    expect(listsStored).toBeGreaterThan(50);
    expect(sent).toBeGreaterThanOrEqual(10_000);
    // Both sides were exercised: plenty of changes got through, and plenty were refused.
    expect(accepted).toBeGreaterThan(1000);
    expect(sent - accepted).toBeGreaterThan(3000);
    // Sized by work (10,500 requests), not time: 19-41 s here, idle or loaded; a slow, busy machine gets
    // ten minutes before this counts as a failure.
  }, 600_000);
});
