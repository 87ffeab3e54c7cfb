import type { IncomingMessage } from 'node:http';
import type { Transform } from 'node:stream';
import { createBrotliDecompress, createGunzip, createInflate } from 'node:zlib';
import type { Upload } from './upload-budget.js';

/** A refusal to send as `{error, reason?, detail}` with `status`. */
export interface BodyRefusal {
  status: 400 | 408 | 413 | 415 | 503;
  error: string;
  reason?: string;
  detail: string;
}

export type BodyResult = { ok: true; body: Buffer } | { ok: false; refusal: BodyRefusal };

export interface BodyLimits {
  limitBytes: number;
  /** Longest the client may take to send the whole body, from when reading starts. */
  timeoutMs: number;
  /** Where the bytes held are counted against what all unverified bodies may hold. */
  upload?: Pick<Upload, 'signal' | 'charge'>;
}

// The encodings body-parser accepted before; the signature covers the decoded body.
const DECODERS: Record<string, (() => Transform) | undefined> = {
  gzip: createGunzip,
  deflate: createInflate,
  br: createBrotliDecompress,
};

/** The answer to a body there is no room for now (with Retry-After). */
export const BUSY: BodyRefusal = {
  status: 503,
  error: 'busy',
  detail: 'too many bytes of unverified requests are being received; retry shortly',
};

const tooLarge = (limit: number): BodyRefusal => ({
  status: 413,
  error: 'payload_too_large',
  detail: `body is larger than ${limit} bytes`,
});

/** Whether the request carries a body at all (as body-parser's `hasBody`). */
export function hasBody(req: IncomingMessage): boolean {
  return req.headers['transfer-encoding'] !== undefined || Number(req.headers['content-length'] ?? 0) > 0;
}

/**
 * What can be refused from the headers alone, before any of the body is read: an encoding that cannot be
 * decoded, a declared length over the limit.
 */
export function refuseFromHeaders(req: IncomingMessage, limitBytes: number): BodyRefusal | undefined {
  const encoding = contentEncoding(req);
  if (encoding !== 'identity' && !DECODERS[encoding]) {
    return {
      status: 415,
      error: 'unsupported_content_encoding',
      detail: 'Content-Encoding must be identity, gzip, deflate or br',
    };
  }
  if (Number(req.headers['content-length'] ?? 0) > limitBytes) return tooLarge(limitBytes);
  if (!isJsonMediaType(req.headers['content-type'])) {
    return {
      status: 415,
      error: 'unsupported_media_type',
      detail: 'a body must be sent as Content-Type: application/json (UTF-8)',
    };
  }
  return undefined;
}

// Only JSON is read (and no Content-Type, as curl without -H sends none with -T): a form or text body is a
// client that means something else, and a charset other than UTF-8 would be read wrongly.
function isJsonMediaType(header: string | undefined): boolean {
  if (header === undefined || header.trim() === '') return true;
  const [type = '', ...params] = header.split(';').map((p) => p.trim().toLowerCase());
  if (type !== 'application/json') return false;
  return params.every((p) => !p.startsWith('charset=') || /^charset="?utf-8"?$/.test(p));
}

// ignoreBOM: true keeps a leading U+FEFF in the text (false would strip it), so JSON.parse refuses it: RFC 8259
// forbids sending one, and the hostile-input property counts such a body as malformed.
const UTF8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

/**
 * The body as text, or undefined when it is not valid UTF-8. A lenient decode would turn bad bytes into
 * U+FFFD and act on a value the caller never sent (a mode of `lo\uFFFDadbalancer` removes a route).
 */
export function decodeUtf8(body: Buffer): string | undefined {
  try {
    return UTF8.decode(body);
  } catch {
    return undefined;
  }
}

/**
 * Reads and decodes the body, refusing it once it (raw or decoded) passes the limit, when it is not complete
 * within the time limit, or when it cannot be decoded. Call refuseFromHeaders first.
 */
export function readBody(req: IncomingMessage, limits: BodyLimits): Promise<BodyResult> {
  return new Promise((resolve) => {
    const decoder = DECODERS[contentEncoding(req)]?.();
    const source = decoder ?? req;
    const chunks: Buffer[] = [];
    let received = 0;
    let decoded = 0;
    let settled = false;

    const finish = (result: BodyResult) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      limits.upload?.signal.removeEventListener('abort', onEvicted);
      req.off('data', onRaw);
      req.off('close', onClose);
      source.off('data', onDecoded);
      source.off('end', onEnd);
      if (decoder) {
        req.unpipe(decoder);
        decoder.destroy();
      }
      // Stop reading: the refusal closes the connection, a complete body has nothing left.
      req.pause();
      resolve(result);
    };
    const onRaw = (chunk: Buffer) => {
      received += chunk.length;
      if (received > limits.limitBytes) finish({ ok: false, refusal: tooLarge(limits.limitBytes) });
    };
    const onDecoded = (chunk: Buffer) => {
      decoded += chunk.length;
      if (decoded > limits.limitBytes) finish({ ok: false, refusal: tooLarge(limits.limitBytes) });
      else if (limits.upload && !limits.upload.charge(chunk.length)) finish({ ok: false, refusal: BUSY });
      else chunks.push(chunk);
    };
    // A newer upload needed the room this one held.
    const onEvicted = () => finish({ ok: false, refusal: BUSY });
    const onEnd = () => finish({ ok: true, body: Buffer.concat(chunks) });
    // The client went away: nobody to answer, but the caller must still release what it holds.
    const onClose = () => {
      if (!req.complete)
        finish({
          ok: false,
          refusal: { status: 400, error: 'request_aborted', detail: 'the client closed the connection' },
        });
    };
    const timer = setTimeout(
      () =>
        finish({
          ok: false,
          refusal: {
            status: 408,
            error: 'request_timeout',
            detail: `body not received within ${limits.timeoutMs} ms`,
          },
        }),
      limits.timeoutMs,
    );

    if (limits.upload?.signal.aborted) return onEvicted();
    limits.upload?.signal.addEventListener('abort', onEvicted);
    req.on('data', onRaw);
    req.on('close', onClose);
    source.on('data', onDecoded);
    source.on('end', onEnd);
    if (decoder) {
      decoder.on('error', () =>
        finish({
          ok: false,
          refusal: {
            status: 400,
            error: 'invalid_request',
            reason: 'bad_content_encoding',
            detail: `body is not valid ${contentEncoding(req)}`,
          },
        }),
      );
      req.pipe(decoder);
    }
  });
}

function contentEncoding(req: IncomingMessage): string {
  return (req.headers['content-encoding'] ?? 'identity').trim().toLowerCase();
}
