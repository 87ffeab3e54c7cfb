import { createHash, createHmac, timingSafeEqual } from 'node:crypto';
import type { WriteStamp } from '../store/desired-store.js';
import { SeenSignatures } from './seen-signatures.js';

export type AuthMode = 'hmac' | 'bearer';

export interface AuthOptions {
  mode: AuthMode;
  secret: string;
  /** How far a signed request's timestamp may be from now, either way. */
  replayWindowSeconds: number;
  /**
   * Where signatures of accepted writes are kept, so that replay protection survives a restart (the service
   * uses `<state file>.replay`). Without it they are kept in memory only.
   */
  replayFile?: string;
}

/** What is known of a request before its body is read. */
export interface RequestHead {
  method: string;
  /** Path and query, as sent. */
  url: string;
  header(name: string): string | undefined;
}

export interface SignedRequest extends RequestHead {
  body: Buffer;
}

export type AuthResult =
  | { ok: true }
  | { ok: false; reason: 'missing_credentials' | 'bad_credentials' | 'stale_timestamp' | 'replayed' };

const SAFE_METHODS = new Set(['GET', 'HEAD']);
const SIGNATURE_FORM = /^sha256=[0-9a-f]{64}$/;
const TIMESTAMP_FORM = /^[0-9]{1,12}$/;

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
  constructor(
    private readonly options: AuthOptions,
    private readonly now: () => number = Date.now,
    // Signatures of writes seen inside the window: an identical write cannot be replayed.
    private readonly seen = new SeenSignatures(options.replayWindowSeconds),
  ) {}

  /** An authenticator whose seen signatures are loaded from, and kept in, `options.replayFile`. */
  static async open(options: AuthOptions, now: () => number = Date.now): Promise<WebhookAuthenticator> {
    if (!options.replayFile || options.mode === 'bearer') return new WebhookAuthenticator(options, now);
    const seen = await SeenSignatures.open(options.replayFile, options.replayWindowSeconds, now() / 1000);
    return new WebhookAuthenticator(options, now, seen);
  }

  /** Whether accepted writes can be recorded (their signatures kept on disk), for readiness. */
  health(): Promise<{ ok: boolean; detail?: string }> {
    return this.seen.health();
  }

  /**
   * The signed write a request is, for ordering it against writes other replicas received: only in HMAC
   * mode, and only called for a request `check` accepted (the headers are then verified).
   */
  stampOf(req: RequestHead): WriteStamp | undefined {
    if (this.options.mode !== 'hmac') return undefined;
    const timestamp = req.header(TIMESTAMP_HEADER);
    const signature = req.header(SIGNATURE_HEADER);
    if (!timestamp || !signature || !TIMESTAMP_FORM.test(timestamp)) return undefined;
    return { signedAt: Number(timestamp), signature };
  }

  /**
   * Everything that can be judged before the body is read, so that a caller without credentials cannot make
   * the service buffer a body: the headers' form and the timestamp's age; in bearer mode the whole check.
   */
  precheck(req: RequestHead): AuthResult {
    return this.judgeHead(req, this.now() / 1000);
  }

  private judgeHead(req: RequestHead, nowSeconds: number): AuthResult {
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
    if (!SIGNATURE_FORM.test(signature)) return { ok: false, reason: 'bad_credentials' };
    const sent = TIMESTAMP_FORM.test(timestamp) ? Number(timestamp) : Number.NaN;
    if (!(Math.abs(nowSeconds - sent) <= this.options.replayWindowSeconds))
      return { ok: false, reason: 'stale_timestamp' };
    return { ok: true };
  }

  /**
   * The full check, over the body: the precheck again (time has passed), the HMAC, then replay. An accepted
   * write's signature is on disk (with a replay file) before this resolves. One reading of the clock serves
   * both the window and the claim: read twice, a copy whose HMAC ran across the window's edge passed the
   * window by the first reading, while the second had already dropped its signature as expired.
   */
  async check(req: SignedRequest): Promise<AuthResult> {
    const nowSeconds = this.now() / 1000;
    const pre = this.judgeHead(req, nowSeconds);
    if (!pre.ok || this.options.mode === 'bearer') return pre;
    const timestamp = req.header(TIMESTAMP_HEADER) ?? '';
    const signature = req.header(SIGNATURE_HEADER) ?? '';
    const expected = sign(this.options.secret, timestamp, req.method, req.url, req.body);
    if (!constantTimeEqual(signature, expected)) return { ok: false, reason: 'bad_credentials' };
    // Reads may repeat within a second (a poller, the status command); only a replayed write does harm.
    if (SAFE_METHODS.has(req.method.toUpperCase())) return { ok: true };
    const fresh = await this.seen.claim(signature, Number(timestamp), nowSeconds);
    return fresh ? { ok: true } : { ok: false, reason: 'replayed' };
  }
}
