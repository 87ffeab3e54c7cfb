/**
 * The hardening through HAProxy's Data Plane API v3: the objects of `dataplaneHardening` (bench/attack/harden.ts)
 *
 * - checked against the OpenAPI documents of v3.0.23, v3.2.15 and v3.4 (specs/dataplaneapi/) for the requests
 *   the provider would send them in: a frontend with its children (`full_section=true`), created or replaced,
 *   and the frontend's tcp-request rules replaced as a list or created one by one;
 * - sent for real to a Data Plane API binary (KUBEBYON_TEST_DATAPLANEAPI_BIN, e.g. v3.4.0) beside HAProxy 2.6,
 *   3.0 and 3.2 (test/support/dataplaneapi-testbed.ts): one transaction creates a slot backend and the frontend
 *   with these objects (per-source limit 3 so that the test can reach it), committed with `force_reload`; then
 *   the file the API wrote is read back, the frontend is read back as objects, a handshake by SNI reaches the
 *   cluster, an unknown SNI is refused, and a 4th idle connection from one source is refused while 3 are held.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { connect as netConnect, type Socket } from 'node:net';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  type DataplaneSource,
  type DataplaneTestbed,
  startDataplaneTestbed,
} from '../../test/support/dataplaneapi-testbed.js';
import type { HaproxyVersion } from '../../test/support/haproxy-testbed.js';
import { OpenApiRequestValidator } from '../../test/support/openapi-validator.js';
import { freeLoopbackPort } from '../../test/support/ports.js';
import { sniProbe, startNamedTlsServer } from '../../test/support/tls.js';
import { REPO } from '../compare/cli.js';
import { HOST } from './bed.js';
import { dataplaneHardening, type Hardening, PROPOSED } from './harden.js';
import { parseEntry, statRow } from './stats.js';

const SPECS = ['v3.0.23', 'v3.2.15', 'v3.4'] as const;
const MAP = '/etc/kubebyon/kubebyon-haproxy-adapter.sni.map';

export interface SchemaCheck {
  api: string;
  request: string;
  problems: string[];
}

export interface LiveCheck {
  api: string;
  version: HaproxyVersion;
  haproxyVersion: string;
  committed: string;
  frontendText: string;
  readBack: { maxconn: unknown; stick_table: unknown; tcp_request_rule_list: unknown };
  sameAsSent: boolean;
  reachesCluster: string;
  unknownSni: string;
  heldFromOneSource: number;
  fourthRefused: boolean;
  entry: Record<string, number> | null;
  dcon: string | undefined;
  dreq: string | undefined;
}

/** The owner's tags as v3.2+ writes them on every object (v3.0.23: none on frontends, binds or rules). */
const OWNER = { owner: { value: 'kubebyon-haproxy-adapter' } };
const tagged = (api: string) => api !== 'v3.0.23';

export function frontendBody(h: Hardening, port: number, api = 'v3.4') {
  const parts = dataplaneHardening(h, MAP, tagged(api) ? OWNER : undefined);
  return {
    name: 'kubebyon_sni',
    mode: 'tcp',
    ...parts.frontend,
    binds: { kubebyon: { name: 'kubebyon', address: '127.0.0.1', port } },
    tcp_request_rule_list: parts.tcp_request_rule_list,
    backend_switching_rule_list: [{ name: `%[req.ssl_sni,lower,map(${MAP})]` }],
  };
}

export function schemaChecks(): SchemaCheck[] {
  const out: SchemaCheck[] = [];
  for (const api of SPECS) {
    const body = frontendBody(PROPOSED, 443, api);
    const spec = JSON.parse(readFileSync(join(REPO, `specs/dataplaneapi/openapi-${api}.json`), 'utf8'));
    const v = new OpenApiRequestValidator(spec);
    const t = 'transaction_id=0a1b2c3d-0000-4000-8000-000000000000';
    const requests: Array<{ method: string; url: string; body: unknown }> = [
      { method: 'POST', url: `/services/haproxy/configuration/frontends?${t}&full_section=true`, body },
      {
        method: 'PUT',
        url: `/services/haproxy/configuration/frontends/kubebyon_sni?${t}&full_section=true`,
        body,
      },
      {
        method: 'PUT',
        url: `/services/haproxy/configuration/frontends/kubebyon_sni/tcp_request_rules?${t}`,
        body: body.tcp_request_rule_list,
      },
      ...body.tcp_request_rule_list.map((rule, i) => ({
        method: 'POST',
        url: `/services/haproxy/configuration/frontends/kubebyon_sni/tcp_request_rules/${i}?${t}`,
        body: rule,
      })),
    ];
    for (const r of requests)
      out.push({
        api,
        request: `${r.method} ${r.url.replace(t, 'transaction_id=…')}`,
        problems: v.check(r),
      });
  }
  return out;
}

function operatorConfig(): string {
  return [
    'global',
    '  stats socket /etc/kubebyon/admin.sock mode 600 level admin expose-fd listeners',
    '  log stderr format short local0 info',
    '  hard-stop-after 30s',
    '',
    'defaults base',
    '  mode tcp',
    '  log global',
    '  timeout connect 5s',
    '  timeout client 1h',
    '  timeout server 1h',
    '',
  ].join('\n');
}

/** Opens idle connections from 127.0.0.1 one by one; how many HAProxy keeps (a refused one is closed at once). */
async function holdIdle(port: number, n: number): Promise<{ held: Socket[]; refused: boolean[] }> {
  const held: Socket[] = [];
  const refused: boolean[] = [];
  for (let i = 0; i < n; i++) {
    const s = netConnect({ host: '127.0.0.1', port });
    let closed = false;
    s.on('error', () => {});
    s.on('close', () => {
      closed = true;
    });
    await new Promise((resolve) => s.once('connect', resolve));
    await sleep(300);
    refused.push(closed);
    if (closed) s.destroy();
    else held.push(s);
  }
  return { held, refused };
}

export async function liveCheck(
  source: DataplaneSource,
  version: HaproxyVersion,
  api: string,
): Promise<LiveCheck> {
  const alpha = await startNamedTlsServer('alpha');
  let tb: DataplaneTestbed | undefined;
  try {
    tb = await startDataplaneTestbed(source, version, operatorConfig());
    writeFileSync(join(tb.dir, 'kubebyon-haproxy-adapter.sni.map'), `${HOST} kubebyon_slot_00001\n`);
    const port = await freeLoopbackPort();
    const h: Hardening = { ...PROPOSED, maxConnPerSource: 3 };
    const body = frontendBody(h, port, api);
    const must = (what: string, r: { status: number; data: unknown }, ok: number[]) => {
      if (!ok.includes(r.status)) throw new Error(`${what}: ${r.status} ${JSON.stringify(r.data)}`);
      return r.data;
    };
    const version_ = must('version', await tb.api.get('/services/haproxy/configuration/version'), [200]);
    const tx = must(
      'open',
      await tb.api.post(`/services/haproxy/transactions?version=${version_}`),
      [201],
    ) as {
      id: string;
    };
    const q = `transaction_id=${tx.id}&full_section=true`;
    must(
      'backend',
      await tb.api.post(`/services/haproxy/configuration/backends?${q}`, {
        name: 'kubebyon_slot_00001',
        mode: 'tcp',
        balance: { algorithm: 'leastconn' },
        servers: { srv1: { name: 'srv1', address: '127.0.0.1', port: alpha.port } },
      }),
      [201, 202],
    );
    must('frontend', await tb.api.post(`/services/haproxy/configuration/frontends?${q}`, body), [201, 202]);
    const commit = await tb.api.put(`/services/haproxy/transactions/${tx.id}?force_reload=true`);
    must('commit', commit, [200, 202]);
    const raw = String(must('raw', await tb.api.get('/services/haproxy/configuration/raw'), [200]));
    const frontendText = (/^frontend kubebyon_sni[\s\S]*?(?=^\S|$(?![\s\S]))/m.exec(raw)?.[0] ?? '').trim();
    const back = must(
      'read back',
      await tb.api.get('/services/haproxy/configuration/frontends/kubebyon_sni?full_section=true'),
      [200],
    ) as Record<string, unknown>;
    const readBack = {
      maxconn: back.maxconn,
      stick_table: back.stick_table,
      tcp_request_rule_list: back.tcp_request_rule_list,
    };
    // Key order aside (the API answers its own order), and without the tags it may add.
    const strip = (x: unknown): string =>
      JSON.stringify(x, (k, v) =>
        k === 'metadata'
          ? undefined
          : v && typeof v === 'object' && !Array.isArray(v)
            ? Object.fromEntries(Object.entries(v).sort(([a], [b]) => a.localeCompare(b)))
            : v,
      );
    const sameAsSent =
      strip(readBack) ===
      strip({
        maxconn: body.maxconn,
        stick_table: body.stick_table,
        tcp_request_rule_list: body.tcp_request_rule_list,
      });
    const info = await tb.runtimeCli('show info');
    const reach = await sniProbe(port, HOST);
    const unknown = await sniProbe(port, 'nobody.kubebyon.test');
    const { held, refused } = await holdIdle(port, 4);
    const entry = parseEntry(await tb.runtimeCli('show table kubebyon_sni key ::ffff:127.0.0.1'));
    const stat = statRow(await tb.runtimeCli('show stat'), 'kubebyon_sni');
    for (const s of held) s.destroy();
    return {
      api,
      version,
      haproxyVersion: /^Version: (.*)$/m.exec(info)?.[1] ?? '',
      committed: `${commit.status}`,
      frontendText,
      readBack,
      sameAsSent,
      reachesCluster: 'reached' in reach ? reach.reached : `failed: ${reach.failed}`,
      unknownSni: 'reached' in unknown ? `reached ${unknown.reached}` : `refused (${unknown.failed})`,
      heldFromOneSource: held.length,
      fourthRefused: refused[3] === true && refused.slice(0, 3).every((r) => !r),
      entry,
      dcon: stat?.dcon,
      dreq: stat?.dreq,
    };
  } finally {
    await tb?.stop();
    await alpha.close();
  }
}

export function dataplaneMarkdown(schema: SchemaCheck[], live: LiveCheck[]): string {
  const objects = (api: string) => {
    const body = frontendBody(PROPOSED, 443, api);
    return JSON.stringify(
      {
        maxconn: body.maxconn,
        stick_table: body.stick_table,
        tcp_request_rule_list: body.tcp_request_rule_list,
      },
      null,
      2,
    );
  };
  const lines = [
    '# bench/attack.ts --mode dataplaneapi: the hardening through the Data Plane API v3',
    '',
    'The objects (defaults of bench/attack/harden.ts; the map path as in the test). v3.0.23 (no `metadata` on',
    'rules; they are known by their shape, as the ClientHello accept is today):',
    '',
    '```json',
    objects('v3.0.23'),
    '```',
    '',
    "v3.2.15 and v3.4: the same, each rule but the inspect delay tagged with the owner's `metadata`:",
    '',
    '```json',
    objects('v3.4'),
    '```',
    '',
    '## Against the OpenAPI documents (specs/dataplaneapi/)',
    '',
    '| API | request | result |',
    '| --- | --- | --- |',
    ...schema.map(
      (s) => `| ${s.api} | \`${s.request}\` | ${s.problems.length === 0 ? 'valid' : s.problems.join('; ')} |`,
    ),
    '',
    '## A real Data Plane API, one transaction, `force_reload=true` (per-source limit 3 for the test)',
    '',
  ];
  for (const l of live)
    lines.push(
      `### Data Plane API ${l.api} on HAProxy ${l.haproxyVersion} (${l.version})`,
      '',
      `commit ${l.committed}; read back equal to what was sent: ${l.sameAsSent}; SNI ${HOST}: ${l.reachesCluster}; unknown SNI: ${l.unknownSni}; ` +
        `idle connections from one source kept: ${l.heldFromOneSource}, the 4th refused: ${l.fourthRefused}; ` +
        `stick-table entry ${JSON.stringify(l.entry)}; frontend dcon ${l.dcon}, dreq ${l.dreq}.`,
      '',
      'The frontend as the API wrote it:',
      '',
      '```',
      l.frontendText,
      '```',
      '',
      ...(l.sameAsSent ? [] : ['Read back:', '', '```json', JSON.stringify(l.readBack, null, 2), '```', '']),
    );
  return `${lines.join('\n')}\n`;
}
