import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MasterCli } from '../../src/providers/haproxy/master-cli.js';

// A stand-in master socket: reads one command up to the half-close, answers, closes (as HAProxy does).
describe('MasterCli', () => {
  let dir: string;
  let server: Server;
  let path: string;
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'kubebyon-cli-'));
    path = join(dir, 'master.sock');
    server = createServer((socket) => {
      let command = '';
      socket.setEncoding('utf8');
      socket.on('data', (chunk: string) => {
        command += chunk;
      });
      socket.on('end', () => socket.end(`answer to ${command.trim()}\n`));
    });
    await new Promise<void>((resolve) => server.listen(path, () => resolve()));
  });
  afterAll(async () => {
    await new Promise<void>((resolve) => server.close(() => resolve()));
    rmSync(dir, { recursive: true, force: true });
  });

  it('counts each command sent and the bytes both ways', async () => {
    const counted = { requests: 0, sent: 0, received: 0 };
    const cli = new MasterCli(path, 5_000, {
      request: () => counted.requests++,
      bytes: (direction, n) => {
        counted[direction] += n;
      },
    });
    const signal = AbortSignal.timeout(5_000);
    expect(await cli.send('show proc', signal)).toBe('answer to show proc\n');
    expect(await cli.send('@1 show stat', signal)).toBe('answer to @1 show stat\n');
    expect(counted).toEqual({
      requests: 2,
      sent: 'show proc\n'.length + '@1 show stat\n'.length,
      received: 'answer to show proc\n'.length + 'answer to @1 show stat\n'.length,
    });
    expect(cli.sent).toBe(2);
  });
});
