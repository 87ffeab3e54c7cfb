#!/usr/bin/env node
// Makes `docker compose logs` readable for scripts/run-local.sh: the adapter's JSON lines become
// "HH:MM:SS service  message  key=value...", and the health checks' own requests (every 2 s) are left out.
import { createInterface } from 'node:readline';

const SKIP = new Set(['level', 'time', 'service', 'msg', 'pid', 'hostname']);
// biome-ignore lint/suspicious/noControlCharactersInRegex: compose writes terminal escapes even without a TTY
const ESCAPES = /\u001b\[[0-9;]*[A-Za-z]/g;

for await (const raw of createInterface({ input: process.stdin })) {
  const line = raw.replace(ESCAPES, '');
  const m = /^(\S+?)(?:-\d+)?\s+\|\s(.*)$/.exec(line);
  const [service, text] = m ? [m[1], m[2]] : ['', line];
  let entry;
  try {
    entry = JSON.parse(text);
  } catch {
    console.log(`${service.padEnd(8)} ${text}`);
    continue;
  }
  if (entry.route === '/healthz') continue;
  const time = new Date(entry.time ?? Date.now()).toISOString().slice(11, 19);
  const fields = Object.entries(entry)
    .filter(([k]) => !SKIP.has(k))
    .map(
      ([k, v]) =>
        `${k}=${typeof v === 'string' ? (v.includes('\n') ? `\n    ${v.replaceAll('\n', '\n    ')}\n` : v) : JSON.stringify(v)}`,
    );
  console.log(`${service.padEnd(8)} ${time} ${entry.msg ?? ''}  ${fields.join(' ')}`.trimEnd());
}
