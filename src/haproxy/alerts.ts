// Lines end in a newline, or in an escaped `\n` where HAProxy's output comes inside an API's message.
const LINE_END = /\\n|\n/;
// Anything before the mark (a timestamp), the mark, the process number, the colon.
const ALERT_PREFIX = /^.*?\[ALERT\]\s*(?:\(\d+\)\s*)?:\s*/;
const MESSAGE_MAX = 2000;

/**
 * HAProxy's own alert lines in its output (a startup log, `haproxy -c`, a reload's answer), without their
 * `[ALERT]    (1) : ` prefix. Pure.
 */
export function alertsIn(output: string): string[] {
  return output
    .split(LINE_END)
    .filter((l) => l.includes('[ALERT]'))
    .map((l) => l.replace(ALERT_PREFIX, '').trim())
    .filter(Boolean);
}

/** HAProxy's own words from its output, for an error message: its ALERT lines, else its last lines. Pure. */
export function haproxyMessage(output: string): string {
  const alerts = alertsIn(output);
  const picked =
    alerts.length > 0
      ? alerts
      : output
          .split(LINE_END)
          .map((l) => l.trim())
          .filter(Boolean)
          .slice(-3);
  return picked.join('; ').slice(0, MESSAGE_MAX);
}
