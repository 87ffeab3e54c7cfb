/**
 * The hardening proposed for the SNI frontend (issue 33, part 3), as lines added to the frontend the adapter
 * writes today. The lead implements it in both providers; this is the bench's model of it, applied to the
 * stock provider's own output (text in, text out) so that "after" differs from "before" by these lines only.
 */

export interface Hardening {
  /** Frontend `maxconn`: the most connections the SNI frontend holds at once (memory bound). 0: not written. */
  maxconn: number;
  /** `reject if { sc0_conn_cur gt N }`: concurrent connections per source (/32 IPv4, /64 IPv6). */
  maxConnPerSource: number;
  /** `reject if { sc0_conn_rate gt N }`: new connections per source per `ratePeriodS`. */
  maxConnRatePerSource: number;
  ratePeriodS: number;
  /** `tcp-request inspect-delay`: how long a connection may take to send its whole ClientHello. */
  clientHelloTimeoutMs: number;
  /** Stick-table entries (distinct sources tracked at once) and how long an idle entry stays. */
  sourceTableSize: number;
  sourceTableExpireS: number;
  /** Reject a ClientHello whose SNI is in no route (only when no default backend takes those). */
  rejectUnknownSni: boolean;
}

export const PROPOSED: Hardening = {
  maxconn: 8000,
  maxConnPerSource: 500,
  maxConnRatePerSource: 1000,
  ratePeriodS: 10,
  clientHelloTimeoutMs: 5000,
  sourceTableSize: 100_000,
  sourceTableExpireS: 60,
  rejectUnknownSni: true,
};

/** The frontend's lines, in order, around its bind and its `use_backend` (map routing). */
export function hardeningLines(h: Hardening, mapPath: string) {
  const head = [
    ...(h.maxconn > 0 ? [`maxconn ${h.maxconn}`] : []),
    `stick-table type ipv6 size ${h.sourceTableSize} expire ${h.sourceTableExpireS}s store conn_cur,conn_rate(${h.ratePeriodS}s)`,
    'tcp-request connection track-sc0 src,ipmask(32,64)',
    `tcp-request connection reject if { sc0_conn_cur gt ${h.maxConnPerSource} }`,
    `tcp-request connection reject if { sc0_conn_rate gt ${h.maxConnRatePerSource} }`,
    `tcp-request inspect-delay ${h.clientHelloTimeoutMs}ms`,
    ...(h.rejectUnknownSni
      ? [`tcp-request content reject unless { req.ssl_sni,lower,map(${mapPath}) -m found }`]
      : []),
    'tcp-request content accept if { req.ssl_hello_type 1 }',
    'tcp-request content reject',
  ];
  return head;
}

/**
 * Today's owned file with the SNI frontend hardened: its `tcp-request` lines replaced by `hardeningLines`
 * (placed after its `bind`), everything else kept byte for byte.
 */
export function harden(owned: string, h: Hardening, mapPath: string): string {
  const lines = owned.split('\n');
  const start = lines.findIndex((l) => /^frontend kubebyon_sni /.test(l));
  if (start < 0) throw new Error('no kubebyon_sni frontend in the owned file');
  let end = start + 1;
  while (end < lines.length && /^ {2}\S/.test(lines[end] as string)) end++;
  const body = lines.slice(start + 1, end).filter((l) => !/^ {2}tcp-request /.test(l));
  const bind = body.findIndex((l) => /^ {2}bind /.test(l));
  if (bind < 0) throw new Error('no bind in the kubebyon_sni frontend');
  const added = hardeningLines(h, mapPath).map((l) => `  ${l}`);
  const frontend = [...body.slice(0, bind + 1), ...added, ...body.slice(bind + 1)];
  return [...lines.slice(0, start + 1), ...frontend, ...lines.slice(end)].join('\n');
}

/** A `tcp_request_rule` as the Data Plane API v3 takes it (the fields used here, alike in v3.0 to v3.4). */
export interface DataplaneTcpRule {
  type: 'connection' | 'content' | 'inspect-delay';
  /** v3.2+: the owner's tags, as on the ClientHello accept today (never on the inspect delay). */
  metadata?: Record<string, { value: string }>;
  action?: 'track-sc' | 'reject' | 'accept';
  track_stick_counter?: number;
  track_key?: string;
  cond?: 'if' | 'unless';
  cond_test?: string;
  timeout?: number;
}

/**
 * The hardening as Data Plane API v3 objects: frontend fields (`maxconn`, `stick_table`) and the frontend's
 * whole `tcp_request_rule_list`, in order (what `frontends/{name}?full_section=true` carries, or
 * `PUT frontends/{name}/tcp_request_rules` replaces). `mapFile` is the path in the map routing rule;
 * `metadata` (v3.2+ only: v3.0 has none on rules, which are then known by their shape) tags each rule.
 */
export function dataplaneHardening(
  h: Hardening,
  mapFile: string,
  metadata?: Record<string, { value: string }>,
) {
  const base: DataplaneTcpRule[] = [
    { type: 'connection', action: 'track-sc', track_stick_counter: 0, track_key: 'src,ipmask(32,64)' },
    {
      type: 'connection',
      action: 'reject',
      cond: 'if',
      cond_test: `{ sc0_conn_cur gt ${h.maxConnPerSource} }`,
    },
    {
      type: 'connection',
      action: 'reject',
      cond: 'if',
      cond_test: `{ sc0_conn_rate gt ${h.maxConnRatePerSource} }`,
    },
    { type: 'inspect-delay', timeout: h.clientHelloTimeoutMs },
    ...(h.rejectUnknownSni
      ? [
          {
            type: 'content',
            action: 'reject',
            cond: 'unless',
            cond_test: `{ req.ssl_sni,lower,map(${mapFile}) -m found }`,
          } as const,
        ]
      : []),
    { type: 'content', action: 'accept', cond: 'if', cond_test: '{ req.ssl_hello_type 1 }' },
    { type: 'content', action: 'reject' },
  ];
  const rules = base.map((r) => (metadata && r.type !== 'inspect-delay' ? { ...r, metadata } : r));
  return {
    frontend: {
      ...(h.maxconn > 0 ? { maxconn: h.maxconn } : {}),
      stick_table: {
        type: 'ipv6' as const,
        size: h.sourceTableSize,
        expire: h.sourceTableExpireS * 1000,
        store: `conn_cur,conn_rate(${h.ratePeriodS}s)`,
      },
    },
    tcp_request_rule_list: rules,
  };
}
