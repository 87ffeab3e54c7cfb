// The service the pipelined-flood benchmark attacks: the real startService with the in-memory provider, on a
// free loopback port, in its own process (so that its RSS is its own). Prints its URL as one line.
// Run by bench/pipeline-flood.ts; not meant to be run by hand.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import { loadConfig } from '../src/config/env.js';
import { MemoryProvider } from '../src/providers/memory/memory-provider.js';
import { startService } from '../src/service.js';
import { freeLoopbackPort } from '../test/support/ports.js';

const dir = mkdtempSync(join(tmpdir(), 'kubebyon-flood-'));
const config = loadConfig({
  KUBEBYON_LISTEN_ADDR: `127.0.0.1:${await freeLoopbackPort()}`,
  KUBEBYON_STATE_FILE: join(dir, 'clusters.json'),
  KUBEBYON_WEBHOOK_SECRET: 'flood-bench-secret-0123456789',
  KUBEBYON_DATAPLANE_PASSWORD: 'unused-by-the-memory-provider',
  KUBEBYON_STATIC_NODE_ADDRESSES: '10.0.0.1,10.0.0.2',
  KUBEBYON_RESYNC_INTERVAL_MS: '0',
});
const service = await startService(config, {
  provider: new MemoryProvider(),
  logger: pino({ level: 'silent' }),
});
process.stdout.write(`${service.url}\n`);
const stop = async () => {
  await service.stop();
  rmSync(dir, { recursive: true, force: true });
  process.exit(0);
};
process.on('SIGTERM', () => void stop());
