import { mkdtempSync, rmSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import pino from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config/env.js';
import { MemoryProvider } from '../../src/providers/memory/memory-provider.js';
import { type Service, startService } from '../../src/service.js';
import { freeLoopbackPort } from '../support/ports.js';
import { within } from '../support/raw-http.js';
import { startWebhookApp, type WebhookApp } from '../support/webhook-app.js';

const LONG = 30_000;

interface Watched {
  socket: Socket;
  received: () => string;
  /** Milliseconds from the connection to its close by the server. */
  closedAfter: Promise<number>;
}

/** A loopback connection that records what it receives and when the server closes it. */
function watch(port: number, paused = false): Watched {
  const started = Date.now();
  const socket = connect(port, '127.0.0.1');
  let got = '';
  socket.on('error', () => {});
  socket.on('data', (d: Buffer) => {
    got += d.toString('latin1');
  });
  if (paused) socket.pause();
  const closedAfter = new Promise<number>((resolve) =>
    socket.once('close', () => resolve(Date.now() - started)),
  );
  return { socket, received: () => got, closedAfter };
}

// Answers follow each other on the wire (a JSON body ends without a newline).
const statusLines = (text: string) =>
  [...text.matchAll(/HTTP\/1\.1 (\d{3}) [A-Z]/g)].map((m) => Number(m[1]));

async function healthzMs(base: string): Promise<number> {
  const started = performance.now();
  const res = await fetch(`${base}/healthz`, { signal: AbortSignal.timeout(10_000) });
  expect(res.status).toBe(200);
  return performance.now() - started;
}

describe('connections that pipeline requests', () => {
  let app: WebhookApp;
  afterEach(async () => {
    await app?.stop();
  });

  it(
    'a connection that pipelines 5,000 requests and reads nothing is closed, having run at most 16',
    async () => {
      // The black-box attack: 5,000 pipelined GET /metrics took RSS from 214 to 680 MB and /healthz 7.9 s.
      app = await startWebhookApp();
      const flood = watch(app.port, true);
      flood.socket.write('GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n'.repeat(5000));
      await sleep(300);
      const healthz = await healthzMs(app.base);
      expect(healthz).toBeLessThan(2000);
      // A paused socket does not notice the close: read to find it.
      flood.socket.resume();
      await within(flood.closedAfter, 5000, 'the server closes the flooding connection');
      const { values } = await app.metrics.webhookRequests.get();
      const metricsAnswered = values
        .filter((v) => v.labels.route === '/metrics')
        .reduce((sum, v) => sum + v.value, 0);
      console.log(
        `[measure] pipelined flood: /healthz in ${healthz.toFixed(1)} ms, ${metricsAnswered} of 5,000 answered, closed after ${await flood.closedAfter} ms`,
      );
      expect(metricsAnswered).toBeLessThanOrEqual(16);
      expect(app.gate.unanswered()).toBe(0);
    },
    LONG,
  );

  it(
    'a client that pipelines a few requests gets every answer, in order',
    async () => {
      app = await startWebhookApp();
      const c = watch(app.port);
      const paths = ['/healthz', '/openapi.json', '/metrics', '/nowhere', '/healthz'];
      c.socket.write(paths.map((p) => `GET ${p} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n`).join(''));
      await expect.poll(() => statusLines(c.received()).length, { timeout: 5000 }).toBe(paths.length);
      expect(statusLines(c.received())).toEqual([200, 200, 200, 404, 200]);
      expect(c.socket.destroyed).toBe(false);
      c.socket.destroy();
      expect(app.gate.closed()).toBe(0);
    },
    LONG,
  );
});

// What README promises about slow clients, against the service as it starts (its own defaults).
describe('slow clients of the service', () => {
  let service: Service | undefined;
  let dir: string | undefined;
  afterEach(async () => {
    await service?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it(
    'are answered 408 and closed between 10 and 11 s, silent or trickling their headers; idle ones sooner',
    async () => {
      dir = mkdtempSync(join(tmpdir(), 'kubebyon-slow-'));
      service = await startService(
        loadConfig({
          KUBEBYON_LISTEN_ADDR: `127.0.0.1:${await freeLoopbackPort()}`,
          KUBEBYON_STATE_FILE: join(dir, 'clusters.json'),
          KUBEBYON_WEBHOOK_SECRET: 'slow-clients-secret-0123',
          KUBEBYON_DATAPLANE_PASSWORD: 'unused-by-the-memory-provider',
          KUBEBYON_STATIC_NODE_ADDRESSES: '10.0.0.1',
          KUBEBYON_RESYNC_INTERVAL_MS: '0',
        }),
        { provider: new MemoryProvider(), logger: pino({ level: 'silent' }) },
      );
      const port = Number(new URL(service.url).port);
      const silent = watch(port);
      const trickling = watch(port);
      trickling.socket.write('GET /healthz HTTP/1.1\r\n');
      const trickle = setInterval(() => trickling.socket.write(`x-n: ${Date.now()}\r\n`), 500);
      const idle = watch(port);
      idle.socket.write('GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n');
      try {
        const [silentMs, tricklingMs, idleMs] = await Promise.all(
          [silent, trickling, idle].map((c) => within(c.closedAfter, 20_000, 'the server closes it')),
        );
        console.log(
          `[measure] slow clients: silent closed after ${silentMs} ms, trickling headers after ${tricklingMs} ms, idle kept-alive after ${idleMs} ms`,
        );
        expect({ silentMs, tricklingMs }).toEqual({
          silentMs: expect.toSatisfy((ms: number) => ms >= 10_000 && ms <= 11_500),
          tricklingMs: expect.toSatisfy((ms: number) => ms >= 10_000 && ms <= 11_500),
        });
        expect(silent.received()).toMatch(/^HTTP\/1\.1 408 /);
        expect(trickling.received()).toMatch(/^HTTP\/1\.1 408 /);
        // Answered, then idle: closed by the keep-alive timeout (5 s, and Node's second of grace).
        expect(idle.received()).toMatch(/^HTTP\/1\.1 200 /);
        expect(idleMs).toBeLessThanOrEqual(7_000);
      } finally {
        clearInterval(trickle);
      }
    },
    LONG,
  );
});
