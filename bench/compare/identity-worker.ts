// The stand-in API servers' thread (`startIdentityServers`): answers with the ports, or why not.
import { parentPort, workerData } from 'node:worker_threads';
import { listenIdentityServers } from './identity.js';

const { addresses, count } = workerData as { addresses: string[]; count: number };
listenIdentityServers(addresses, count).then(
  (ports) => parentPort?.postMessage({ ports }),
  (err: unknown) => parentPort?.postMessage({ error: err instanceof Error ? err.message : String(err) }),
);
