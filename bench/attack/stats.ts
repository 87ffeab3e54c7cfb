/** Reads HAProxy's runtime answers (`show info`, `show stat`, `show table`) into numbers. Pure. */

export function parseInfo(text: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const line of text.split('\n')) {
    const i = line.indexOf(':');
    if (i > 0) out[line.slice(0, i).trim()] = line.slice(i + 1).trim();
  }
  return out;
}

/** One proxy's row of `show stat` (CSV) as name → value. */
export function statRow(text: string, proxy: string, server = 'FRONTEND'): Record<string, string> | null {
  const lines = text.split('\n');
  const header = lines.find((l) => l.startsWith('# '));
  if (!header) return null;
  const names = header.slice(2).split(',');
  const row = lines.find((l) => l.startsWith(`${proxy},${server},`));
  if (!row) return null;
  const values = row.split(',');
  return Object.fromEntries(names.map((n, i) => [n, values[i] ?? '']));
}

export interface TableHeader {
  name: string;
  size: number;
  used: number;
}

/** `# table: kubebyon_sni, type: ipv6, size:100000, used:3` lines. */
export function parseTables(text: string): TableHeader[] {
  const out: TableHeader[] = [];
  for (const m of text.matchAll(/# table: ([^,]+), type: [^,]+, size:([0-9]+), used:([0-9]+)/g))
    out.push({ name: m[1] as string, size: Number(m[2]), used: Number(m[3]) });
  return out;
}

/** The counters of one entry (`key=… use=… exp=… conn_cur=2 conn_rate(10000)=7`), or null when absent. */
export function parseEntry(text: string): Record<string, number> | null {
  const line = text.split('\n').find((l) => /\bkey=/.test(l));
  if (!line) return null;
  const out: Record<string, number> = {};
  for (const m of line.matchAll(/\b([a-z_]+)(?:\([0-9]+\))?=([0-9]+)/g)) out[m[1] as string] = Number(m[2]);
  return out;
}

export const num = (v: string | undefined): number | null => {
  if (v === undefined || v === '') return null;
  const n = Number(v);
  return Number.isFinite(n) ? n : null;
};
