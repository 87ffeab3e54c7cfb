import { connect, type Socket } from 'node:net';

export interface RawResponse {
  status: number;
  headers: Record<string, string>;
  body: string;
}

export interface RawExchange {
  socket: Socket;
  /** The first response on the connection; rejects if none is complete within `timeoutMs`. */
  response: Promise<RawResponse>;
  /** Resolves when the server ends the connection. */
  closed: Promise<void>;
}

/**
 * Writes `head` (request line and headers, without the blank line) and then `body` as given, on a raw
 * connection: for requests a fetch client would not send, such as a body that never arrives.
 */
export function rawRequest(port: number, head: string[], body = '', timeoutMs = 8000): RawExchange {
  const socket = connect(port, '127.0.0.1');
  socket.on('error', () => {});
  socket.write(`${head.join('\r\n')}\r\n\r\n${body}`);
  const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
  const response = new Promise<RawResponse>((resolve, reject) => {
    let data = Buffer.alloc(0);
    const timer = setTimeout(() => reject(new Error(`no response within ${timeoutMs} ms`)), timeoutMs);
    const parse = () => {
      const end = data.indexOf('\r\n\r\n');
      if (end < 0) return;
      const [statusLine = '', ...lines] = data.subarray(0, end).toString('latin1').split('\r\n');
      const headers: Record<string, string> = {};
      for (const line of lines) {
        const colon = line.indexOf(':');
        headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim();
      }
      const length = Number(headers['content-length'] ?? 0);
      if (data.length - end - 4 < length) return;
      clearTimeout(timer);
      resolve({
        status: Number(statusLine.split(' ')[1]),
        headers,
        body: data.subarray(end + 4, end + 4 + length).toString('utf8'),
      });
    };
    socket.on('data', (chunk: Buffer) => {
      data = Buffer.concat([data, chunk]);
      parse();
    });
    socket.once('close', () => {
      clearTimeout(timer);
      reject(new Error('connection closed without a complete response'));
    });
  });
  response.catch(() => {});
  return { socket, response, closed };
}

/** A bounded wait that fails the test by name instead of hanging it. */
export async function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: not within ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([p, timeout]);
  } finally {
    clearTimeout(timer);
  }
}
