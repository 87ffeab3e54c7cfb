import { createServer, type IncomingMessage, request, type Server } from 'node:http';

/**
 * A tiny HTTP proxy on 127.0.0.1 in front of a loopback API, for tests that must act at an exact moment of
 * the conversation (a foreign commit just before ours, a crash while a transaction is open). `before` runs
 * before each request is forwarded; resolving `'drop'` answers nothing and keeps the connection open.
 */
export interface InterceptingProxy {
  url: string;
  seen: Array<{ method: string; path: string }>;
  close(): Promise<void>;
}

export async function startProxy(
  target: string,
  before: (req: { method: string; path: string }) => Promise<'forward' | 'drop'> | 'forward' | 'drop',
): Promise<InterceptingProxy> {
  const upstream = new URL(target);
  const seen: InterceptingProxy['seen'] = [];
  const held: IncomingMessage[] = [];
  const server: Server = createServer(async (req, res) => {
    const info = { method: req.method ?? 'GET', path: req.url ?? '/' };
    seen.push(info);
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    if ((await before(info)) === 'drop') {
      held.push(req);
      return;
    }
    const out = request(
      {
        host: upstream.hostname,
        port: upstream.port,
        method: info.method,
        path: info.path,
        headers: req.headers,
      },
      (answer) => {
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        answer.pipe(res);
      },
    );
    out.on('error', () => res.destroy());
    out.end(Buffer.concat(chunks));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  const address = server.address();
  if (address === null || typeof address === 'string') throw new Error('proxy has no port');
  return {
    url: `http://127.0.0.1:${address.port}`,
    seen,
    close: () =>
      new Promise((resolve) => {
        for (const r of held) r.socket.destroy();
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
