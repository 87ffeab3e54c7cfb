import { sign } from '../../src/webhook/auth.js';

export interface SignedClient {
  request(
    method: string,
    path: string,
    body?: unknown,
    opts?: { timestamp?: number; secret?: string },
  ): Promise<{
    status: number;
    // biome-ignore lint/suspicious/noExplicitAny: tests read arbitrary JSON answers
    body: any;
  }>;
}

/**
 * Sends webhook calls the way kubebyon-api does: JSON body, timestamp and HMAC signature headers. Like a
 * correct client, it never signs the same write twice in one second (the service refuses that as a replay):
 * an identical call within the same second is signed with the next second.
 */
export function signedClient(baseUrl: string, secret: string): SignedClient {
  const lastSigned = new Map<string, number>();
  return {
    async request(method, path, body, opts = {}) {
      const raw = body === undefined ? Buffer.alloc(0) : Buffer.from(JSON.stringify(body));
      const key = `${method} ${path} ${raw.toString('base64')}`;
      let seconds = opts.timestamp ?? Math.floor(Date.now() / 1000);
      if (opts.timestamp === undefined) {
        seconds = Math.max(seconds, (lastSigned.get(key) ?? 0) + 1);
        lastSigned.set(key, seconds);
      }
      const timestamp = String(seconds);
      const res = await fetch(`${baseUrl}${path}`, {
        method,
        headers: {
          'content-type': 'application/json',
          'x-kubebyon-timestamp': timestamp,
          'x-kubebyon-signature': sign(opts.secret ?? secret, timestamp, method, path, raw),
        },
        ...(raw.length > 0 ? { body: raw } : {}),
      });
      const text = await res.text();
      return { status: res.status, body: text ? JSON.parse(text) : undefined };
    },
  };
}
