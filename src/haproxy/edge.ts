/**
 * What the SNI frontend does to a connection before it reaches a slot: the public :443's guard. Both
 * providers write the same lines (`edgeLines`) and read them back (`readEdge`). Pure.
 *
 * - Per source (issue 33, measured in `bench/attack.ts`): one stick-table entry per IPv4 address or IPv6
 *   /64; a source over its open connections or its connection rate is refused at accept, before any buffer.
 * - The frontend's `maxconn` bounds its memory whatever the process limit is.
 * - A ClientHello is awaited for the inspect delay; anything else (no ClientHello in time, not TLS, an SNI
 *   no route has when there is no default backend) is rejected.
 * - Authorized networks (issue 34): the frontend tracks the slot the SNI map names in the refusals table;
 *   each slot backend guards itself (`slotGuardLines`): its source is looked up in the slot's own map
 *   (`src,map_ip(<owner>.allow.<slot>.map)`, longest prefix, IPv4 and IPv6 keys in one file; `slot-allow.ts`
 *   says what the file holds). A refused connection is counted in the slot's entry and rejected right after
 *   its ClientHello, before a byte reaches the server; HAProxy logs it (`PR`, `<slot>/<NOSRV>`, the source
 *   and the SNI).
 * - The log line names the SNI (HAProxy's `tcplog` format, then the host).
 */
export interface Edge {
  /** The frontend's `maxconn`; 0: not written. */
  readonly maxConn: number;
  /** Per-source limits (0: that limit is not written); null: no stick table at all. */
  readonly perSource: PerSource | null;
  /** Reject an SNI that no route has once the ClientHello is read (only without a default backend). */
  readonly rejectUnknown: boolean;
  /**
   * The logical allow map (authorized networks, `allow.ts`): the slots' own maps are named after it
   * (`slotAllowMapName`). The frontend's lines do not name it: readers are told it.
   */
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

/** A bind that takes IPv4 clients on an IPv6 socket (`[::]:443`, `[2001:db8::1]:443` too). */
export function isDualStack(address: string): boolean {
  return address.includes(':');
}

export interface EdgeFiles {
  sniMap: string;
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
  const lines: string[] = [];
  if (int('maxconn', edge.maxConn) > 0) lines.push(`maxconn ${edge.maxConn}`);
  const p = edge.perSource;
  if (p)
    lines.push(
      `stick-table type ipv6 size ${int('table size', p.tableSize)} expire ${TABLE_EXPIRE} store conn_cur,conn_rate(10s)`,
    );
  lines.push('log global', `log-format ${LOG_FORMAT}`);
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
  // Every routed connection is tracked by its slot: the slot's guard counts a refusal there.
  lines.push(
    `tcp-request content track-sc1 var(txn.kb_slot) table ${edge.refusals} if { var(txn.kb_slot) -m found }`,
  );
  lines.push('tcp-request content accept if { req.ssl_hello_type 1 }', 'tcp-request content reject');
  return lines;
}

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
 * writes for the values they carry, with `allowMap` (the owner's, which the lines do not name). Tolerant of
 * how the Data Plane API writes a stick table back (`size 100k`, `expire 1m`) and of the line order it keeps.
 */
export function readEdge(body: readonly string[], allowMap: string): ReadEdge {
  const out: ReadEdge = { inspectDelayMs: null, acceptsTlsHello: false, edge: null };
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
  if (sniFile === undefined || refusals === undefined || out.inspectDelayMs === null) return out;
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
  const want = edgeLines(edge, out.inspectDelayMs, { sniMap: sniFile });
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

/**
 * A slot backend's guard (authorized networks): its source looked up in the slot's own map `file` (the
 * longest prefix holding it must say `1`: `slot-allow.ts`); any other source is counted in the slot's
 * refusals entry (tracked by the frontend) and rejected.
 */
export function slotGuardLines(file: string): string[] {
  return [
    `acl kb_allowed src,map_ip(${file}) -m str 1`,
    'tcp-request content sc-inc-gpc0(1) unless kb_allowed',
    'tcp-request content reject unless kb_allowed',
  ];
}

/**
 * The map file a slot backend's body guards by, when its guard lines are exactly `slotGuardLines`' (once
 * each, and no other line of their kinds); undefined otherwise (none, a hand edit, an older release).
 */
export function readSlotGuard(body: readonly string[]): string | undefined {
  const acl = body.find((l) => l.startsWith('acl ')) ?? '';
  const file = /^acl kb_allowed src,map_ip\((\S+)\) -m str 1$/.exec(acl)?.[1];
  if (file === undefined) return undefined;
  const want = slotGuardLines(file);
  const kinds = body.filter((l) => /^(acl |tcp-request )/.test(l));
  return kinds.length === want.length && want.every((l) => kinds.includes(l)) ? file : undefined;
}

/** A line `slotGuardLines` writes (of any value). */
export function isSlotGuardLine(line: string): boolean {
  return /^(acl kb_allowed |tcp-request content (sc-inc-gpc0\(1\)|reject) unless )/.test(line);
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
