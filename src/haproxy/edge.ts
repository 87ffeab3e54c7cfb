import { formatAddress, parseNetwork } from '../routes/networks.js';

/**
 * What the SNI frontend does to a connection before it reaches a slot: the public :443's guard. Both
 * providers write the same lines (`edgeLines`) and read them back (`readEdge`). Pure.
 *
 * - Per source (issue 33, measured in `bench/attack.ts`): one stick-table entry per IPv4 address or IPv6
 *   /64; a source over its open connections or its connection rate is refused at accept, before any buffer.
 * - The frontend's `maxconn` bounds its memory whatever the process limit is.
 * - A ClientHello is awaited for the inspect delay; anything else (no ClientHello in time, not TLS, an SNI
 *   no route has when there is no default backend) is rejected.
 * - Authorized networks (issue 34): the allow map (`<owner>.allow.map`) holds, for a restricted slot, its
 *   name (the flag) and one key `<network>|<slot>` per network. The source, masked to each prefix length and
 *   joined to the slot the SNI map names, is looked up there: 33 lengths for IPv4, and the IPv6 ones. A
 *   refused connection is counted per slot in the refusals table and rejected right after its ClientHello,
 *   before a byte reaches the server; HAProxy logs it (`PR`, `<NOSRV>`, the source and the SNI).
 * - The log line names the SNI (HAProxy's `tcplog` format, then the host).
 */
export interface Edge {
  /** The frontend's `maxconn`; 0: not written. */
  readonly maxConn: number;
  /** Per-source limits (0: that limit is not written); null: no stick table at all. */
  readonly perSource: PerSource | null;
  /** Reject an SNI that no route has once the ClientHello is read (only without a default backend). */
  readonly rejectUnknown: boolean;
  /** The allow map's name (authorized networks), as the frontend's SNI map is named. */
  readonly allowMap: string;
  /** The backend holding the refusals table, counted per slot. */
  readonly refusals: string;
}

export interface PerSource {
  readonly maxConn: number;
  /** Connections opened over 10 s. */
  readonly maxRate: number;
  /** Entries of the stick table (207-228 bytes each, measured). */
  readonly tableSize: number;
}

/** A source's stick-table entry lasts this long after its last connection (at least the 10 s rate period). */
const TABLE_EXPIRE = '60s';
/** The refusals table: one entry per slot that refused a connection, kept until HAProxy reloads. */
export const REFUSALS_TABLE = 'type string len 64 size 100k store gpc0';
/** HAProxy's own `option tcplog` format, then the SNI. */
export const LOG_FORMAT =
  '"%ci:%cp [%t] %ft %b/%s %Tw/%Tc/%Tt %B %ts %ac/%fc/%bc/%sc/%rc %sq/%bq %[var(txn.kb_sni)]"';

/** The prefix lengths looked up, most specific first: each IPv4 length (IPv6 too up to 32), then IPv6's. */
const LENGTHS: ReadonlyArray<{ v4: number; v6: number }> = [
  ...Array.from({ length: 33 }, (_, i) => ({ v4: 32 - i, v6: 32 - i })),
  ...Array.from({ length: 96 }, (_, i) => ({ v4: 32, v6: 128 - i })),
];

/** The allow-map keys that let `networks` reach `slot`: its flag and one key per network. */
export function allowKeys(slot: string, networks: readonly string[], dualStack: boolean): string[] {
  if (networks.length === 0) return [];
  const keys = new Set([slot]);
  for (const text of networks) {
    keys.add(`${text}|${slot}`);
    const parsed = parseNetwork(text);
    if (!parsed.ok) continue;
    const n = parsed.network;
    // An IPv6 socket that also takes IPv4 sees an IPv4 client as ::ffff:a.b.c.d: the same network, mapped.
    if (dualStack && n.family === 4)
      keys.add(`${formatAddress(6, (0xffffn << 32n) | n.bits)}/${96 + n.prefix}|${slot}`);
    // A source in ::/96 is looked up by its exact address alone (`kb_v6compat`): ::1 gets a key of its own
    // when a wider IPv6 network holds it.
    const host = BigInt(128 - n.prefix);
    if (n.family === 6 && n.prefix < 128 && n.bits >> host === LOOPBACK6 >> host) keys.add(`::1/128|${slot}`);
  }
  return [...keys];
}

/** ::1, the IPv6 loopback. */
const LOOPBACK6 = 1n;

/** A bind that takes IPv4 clients on an IPv6 socket (`[::]:443`, `[2001:db8::1]:443` too). */
export function isDualStack(address: string): boolean {
  return address.includes(':');
}

export interface EdgeFiles {
  sniMap: string;
  allowMap: string;
}

/**
 * The frontend's lines from its mode and bind to its `use_backend`, exclusive: limits, ACLs, the inspect
 * delay and the content rules. Values are checked by the callers' renderers (names, files); numbers here.
 */
export function edgeLines(edge: Edge, inspectDelayMs: number, files: EdgeFiles): string[] {
  const int = (what: string, n: number) => {
    if (!Number.isSafeInteger(n) || n < 0) throw new RangeError(`bad ${what}: ${n}`);
    return n;
  };
  const allow = files.allowMap;
  const lines: string[] = [];
  if (int('maxconn', edge.maxConn) > 0) lines.push(`maxconn ${edge.maxConn}`);
  const p = edge.perSource;
  if (p)
    lines.push(
      `stick-table type ipv6 size ${int('table size', p.tableSize)} expire ${TABLE_EXPIRE} store conn_cur,conn_rate(10s)`,
    );
  lines.push('log global', `log-format ${LOG_FORMAT}`);
  lines.push(`acl kb_restricted var(txn.kb_slot),map(${allow}) -m found`);
  for (const { v4, v6 } of LENGTHS)
    lines.push(`acl kb_allowed src,ipmask(${v4},${v6}),concat(/${v6}|,txn.kb_slot),map(${allow}) -m found`);
  // HAProxy 3.0 and later turn a source in ::/96 into IPv4 in `ipmask` (::1 becomes 0.0.0.1, which IPv4
  // lists such as 0.0.0.0/0 would hold); 2.6 does not. Such a source is judged by its exact address alone.
  lines.push(
    'acl kb_v6compat src ::/96',
    `acl kb_v6compat_allowed src,concat(/128|,txn.kb_slot),map(${allow}) -m found`,
  );
  if (p) {
    lines.push('tcp-request connection track-sc0 src,ipmask(32,64)');
    if (p.maxConn > 0)
      lines.push(
        `tcp-request connection reject if { sc0_conn_cur gt ${int('per-source connections', p.maxConn)} }`,
      );
    if (p.maxRate > 0)
      lines.push(
        `tcp-request connection reject if { sc0_conn_rate gt ${int('per-source rate', p.maxRate)} }`,
      );
  }
  lines.push(
    `tcp-request inspect-delay ${int('inspect delay', inspectDelayMs)}ms`,
    'tcp-request content set-var(txn.kb_sni) req.ssl_sni,lower if { req.ssl_hello_type 1 }',
    `tcp-request content set-var(txn.kb_slot) var(txn.kb_sni),map(${files.sniMap})`,
  );
  if (edge.rejectUnknown) lines.push('tcp-request content reject unless { var(txn.kb_slot) -m found }');
  for (const r of REFUSED)
    lines.push(`tcp-request content track-sc1 var(txn.kb_slot) table ${edge.refusals} if ${r}`);
  for (const r of REFUSED) lines.push(`tcp-request content sc-inc-gpc0(1) if ${r}`);
  for (const r of REFUSED) lines.push(`tcp-request content reject if ${r}`);
  lines.push('tcp-request content accept if { req.ssl_hello_type 1 }', 'tcp-request content reject');
  return lines;
}

/** A refused connection: a restricted slot, and a source no key allows (by prefix, or exactly in ::/96). */
const REFUSED = [
  'kb_restricted !kb_v6compat !kb_allowed',
  'kb_restricted kb_v6compat !kb_v6compat_allowed',
] as const;

/** What a frontend's body says, as `readEdge` understands it. */
export interface ReadEdge {
  inspectDelayMs: number | null;
  acceptsTlsHello: boolean;
  /** The guard as written by this release; null when the lines are not exactly those (an older release). */
  edge: Edge | null;
}

/**
 * Reads the body lines of a frontend (comments and tags stripped, single spaces): the inspect delay, the
 * ClientHello accept (what every release wrote), and the guard when the lines are exactly what `edgeLines`
 * writes for the values they carry. `fileName` turns a map file back into the map's name. Tolerant of how the
 * Data Plane API writes a stick table back (`size 100k`, `expire 1m`) and of the line order it keeps.
 */
export function readEdge(body: readonly string[], fileName: (file: string) => string | undefined): ReadEdge {
  const out: ReadEdge = { inspectDelayMs: null, acceptsTlsHello: false, edge: null };
  let allowFile: string | undefined;
  let sniFile: string | undefined;
  let refusals: string | undefined;
  let maxConn = 0;
  let table: number | undefined;
  let perConn = 0;
  let perRate = 0;
  let rejectUnknown = false;
  const readers: Array<[RegExp, (m: RegExpExecArray) => void]> = [
    [
      /^tcp-request inspect-delay ([0-9]+)(ms|s)?$/,
      (m) => {
        out.inspectDelayMs = Number(m[1]) * (m[2] === 's' ? 1000 : 1);
      },
    ],
    [
      /^tcp-request content accept if \{ req\.ssl_hello_type 1 \}$/,
      () => {
        out.acceptsTlsHello = true;
      },
    ],
    [
      /^maxconn ([0-9]+)$/,
      (m) => {
        maxConn = Number(m[1]);
      },
    ],
    // The API writes `size 100k` for 100 * 1024 entries.
    [
      /^stick-table type ipv6 size ([0-9]+)(k|m|g)? /,
      (m) => {
        table = Number(m[1]) * ({ k: 1024, m: 1024 ** 2, g: 1024 ** 3 }[m[2] as 'k'] ?? 1);
      },
    ],
    [
      /^acl kb_restricted var\(txn\.kb_slot\),map\((\S+)\) -m found$/,
      (m) => {
        allowFile = m[1];
      },
    ],
    [
      /^tcp-request content set-var\(txn\.kb_slot\) var\(txn\.kb_sni\),map\((\S+)\)$/,
      (m) => {
        sniFile = m[1];
      },
    ],
    [
      /^tcp-request content track-sc1 var\(txn\.kb_slot\) table (\S+) if /,
      (m) => {
        refusals = m[1];
      },
    ],
    [
      /^tcp-request connection reject if \{ sc0_conn_cur gt ([0-9]+) \}$/,
      (m) => {
        perConn = Number(m[1]);
      },
    ],
    [
      /^tcp-request connection reject if \{ sc0_conn_rate gt ([0-9]+) \}$/,
      (m) => {
        perRate = Number(m[1]);
      },
    ],
    [
      /^tcp-request content reject unless \{ var\(txn\.kb_slot\) -m found \}$/,
      () => {
        rejectUnknown = true;
      },
    ],
  ];
  for (const line of body)
    for (const [re, read] of readers) {
      const m = re.exec(line);
      if (m) {
        read(m);
        break;
      }
    }
  const allowMap = allowFile === undefined ? undefined : fileName(allowFile);
  if (
    allowMap === undefined ||
    sniFile === undefined ||
    refusals === undefined ||
    out.inspectDelayMs === null
  )
    return out;
  const tracked = body.includes('tcp-request connection track-sc0 src,ipmask(32,64)');
  const edge: Edge = {
    maxConn,
    perSource:
      table !== undefined && tracked ? { maxConn: perConn, maxRate: perRate, tableSize: table } : null,
    rejectUnknown,
    allowMap,
    refusals,
  };
  // The guard counts only when every line is there, once: a hand edit or a partial write is rewritten.
  const want = edgeLines(edge, out.inspectDelayMs, { sniMap: sniFile, allowMap: allowFile as string });
  const have = new Set(body.map((l) => (l.startsWith('stick-table ') ? 'stick-table' : l)));
  const missing = want.some((l) => !have.has(l.startsWith('stick-table ') ? 'stick-table' : l));
  const extra = body.filter((l) => isEdgeLine(l)).length !== want.length;
  if (!missing && !extra) out.edge = edge;
  return out;
}

/** A line `edgeLines` writes (of any value), so that a line too many is seen. */
export function isEdgeLine(line: string): boolean {
  return /^(maxconn |stick-table |log global$|log-format |acl kb_|tcp-request (connection|content|inspect-delay)( |$))/.test(
    line,
  );
}

/** An edge's text for a plan's field change (`update_frontend`). */
export function edgeText(edge: Edge | null | undefined): string {
  if (!edge) return 'none';
  const p = edge.perSource;
  return [
    `maxconn=${edge.maxConn}`,
    p ? `per_source=${p.maxConn}/${p.maxRate}/${p.tableSize}` : 'per_source=none',
    `reject_unknown=${edge.rejectUnknown}`,
    `allow_map=${edge.allowMap}`,
    `refusals=${edge.refusals}`,
  ].join(',');
}

const NAME = /^[A-Za-z0-9_.:-]{1,127}$/;
const V4_NET = /^(?:(?:0|[1-9][0-9]{0,2})\.){3}(?:0|[1-9][0-9]{0,2})\/(?:0|[1-9][0-9]?)$/;
const V6_NET = /^[0-9a-f:.]{2,45}\/(?:0|[1-9][0-9]{0,2})$/;

/**
 * Whether `key` is one `allowKeys` writes: a slot's name (its flag), or `<network>|<slot>` with the network
 * in canonical text (IPv4, IPv6, or IPv4 as mapped IPv6). Checked before a key reaches a file or a command.
 */
export function isAllowKey(key: string): boolean {
  if (ALLOW_KEYS_SEEN.has(key)) return true;
  const ok = checkAllowKey(key);
  if (ok) {
    // A key once checked stays valid (a string cannot change): 85 000 keys are checked again on every write
    // of the allow map, at about 5 µs each (bench/networks.ts, N = 5000 × 16). Bounded: cleared past a million.
    if (ALLOW_KEYS_SEEN.size >= ALLOW_KEYS_SEEN_MAX) ALLOW_KEYS_SEEN.clear();
    ALLOW_KEYS_SEEN.add(key);
  }
  return ok;
}

const ALLOW_KEYS_SEEN = new Set<string>();
const ALLOW_KEYS_SEEN_MAX = 1_000_000;

function checkAllowKey(key: string): boolean {
  const bar = key.indexOf('|');
  if (bar < 0) return NAME.test(key);
  const net = key.slice(0, bar);
  const slot = key.slice(bar + 1);
  if (!NAME.test(slot) || !(V4_NET.test(net) || V6_NET.test(net))) return false;
  const parsed = parseNetwork(net);
  if (parsed.ok)
    return `${formatAddress(parsed.network.family, parsed.network.bits)}/${parsed.network.prefix}` === net;
  // The mapped twin of an IPv4 network (`::ffff:a.b.c.d/96+L`), which the webhook itself refuses.
  const m = /^::ffff:((?:[0-9]{1,3}\.){3}[0-9]{1,3})\/([0-9]{1,3})$/.exec(net);
  const v4 = m ? parseNetwork(`${m[1]}/${Number(m[2]) - 96}`) : undefined;
  return v4?.ok === true && v4.network.family === 4 && `::ffff:${m?.[1]}/${m?.[2]}` === net;
}

/** The value of every allow-map key. */
export const ALLOW_VALUE = '1';

/**
 * The entries of the refusals table as HAProxy's `show table <name>` lists them (`0x...: key=<slot> use=0
 * exp=0 [shard=0] gpc0=<n>`): slot -> connections refused. Lines it does not know are skipped.
 */
export function parseShowTable(text: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const line of text.split('\n')) {
    const key = / key=(\S+)/.exec(line)?.[1];
    const count = / gpc0=([0-9]+)/.exec(line)?.[1];
    if (key !== undefined && count !== undefined) out.set(key, Number(count));
  }
  return out;
}
