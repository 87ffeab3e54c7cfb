import { createHash, createHmac, timingSafeEqual } from 'node:crypto';

export type AuthMode = 'hmac' | 'bearer';

export interface AuthOptions {
  mode: AuthMode;
  secret: string;
  /** How far a signed request's timestamp may be from now, either way. */
  replayWindowSeconds: number;
}

export interface SignedRequest {
  method: string;
  /** Path and query, as sent. */
  url: string;
  body: Buffer;
  header(name: string): string | undefined;
}

export type AuthResult =
  | { ok: true }
  | { ok: false; reason: 'missing_credentials' | 'bad_credentials' | 'stale_timestamp' | 'replayed' };

const SAFE_METHODS = new Set(['GET', 'HEAD']);

export const TIMESTAMP_HEADER = 'x-kubebyon-timestamp';
export const SIGNATURE_HEADER = 'x-kubebyon-signature';

/**
 * The string a caller signs: timestamp, method, path and body. Method and path are covered so that a captured
 * signature cannot be replayed against another cluster or verb (a DELETE has an empty body).
 */
export function signingInput(timestamp: string, method: string, url: string, body: Buffer): Buffer {
  return Buffer.concat([Buffer.from(`${timestamp}\n${method.toUpperCase()}\n${url}\n`, 'utf8'), body]);
}

/** `sha256=<hex>` for the given request: what kubebyon-api sends in X-Kubebyon-Signature. */
export function sign(secret: string, timestamp: string, method: string, url: string, body: Buffer): string {
  return `sha256=${createHmac('sha256', secret)
    .update(signingInput(timestamp, method, url, body))
    .digest('hex')}`;
}

// Hashing both sides first gives equal lengths, so the comparison time says nothing about the secret.
function constantTimeEqual(a: string, b: string): boolean {
  return timingSafeEqual(createHash('sha256').update(a).digest(), createHash('sha256').update(b).digest());
}

/** Checks webhook credentials: an HMAC signature with a replay window (default), or a bearer token. */
export class WebhookAuthenticator {
  // Signatures of writes seen inside the window: an identical write cannot be replayed.
  private readonly seen = new Map<string, number>();

  constructor(
    private readonly options: AuthOptions,
    private readonly now: () => number = Date.now,
  ) {}

  check(req: SignedRequest): AuthResult {
    if (this.options.mode === 'bearer') {
      const header = req.header('authorization');
      if (!header?.startsWith('Bearer ')) return { ok: false, reason: 'missing_credentials' };
      return constantTimeEqual(header.slice(7), this.options.secret)
        ? { ok: true }
        : { ok: false, reason: 'bad_credentials' };
    }
    const timestamp = req.header(TIMESTAMP_HEADER);
    const signature = req.header(SIGNATURE_HEADER);
    if (!timestamp || !signature) return { ok: false, reason: 'missing_credentials' };
    const expected = sign(this.options.secret, timestamp, req.method, req.url, req.body);
    if (!constantTimeEqual(signature, expected)) return { ok: false, reason: 'bad_credentials' };
    const nowSeconds = this.now() / 1000;
    const sent = /^[0-9]{1,12}$/.test(timestamp) ? Number(timestamp) : Number.NaN;
    if (!(Math.abs(nowSeconds - sent) <= this.options.replayWindowSeconds))
      return { ok: false, reason: 'stale_timestamp' };
    // Reads may repeat within a second (a poller, the status command); only a replayed write does harm.
    if (SAFE_METHODS.has(req.method.toUpperCase())) return { ok: true };
    this.forgetExpired(nowSeconds);
    if (this.seen.has(signature)) return { ok: false, reason: 'replayed' };
    this.seen.set(signature, sent);
    return { ok: true };
  }

  private forgetExpired(nowSeconds: number): void {
    for (const [signature, sent] of this.seen) {
      if (nowSeconds - sent > this.options.replayWindowSeconds) this.seen.delete(signature);
    }
  }
}
