#!/usr/bin/env node
// Stand-ins for vCluster API servers, for scripts/run-local.sh: one TLS server per `name=port` argument on
// 127.0.0.1, with a throw-away self-signed certificate (made by openssl), answering GET /version like a
// Kubernetes API server, with the cluster's name in gitVersion so that a client sees which one it reached.
// Prints "ready <name> <port>" per server, one line per request, and stops on SIGTERM or SIGINT.
import { createServer } from 'node:https';
import { selfSignedKeyPair } from '../lib/self-signed.mjs';

const specs = process.argv.slice(2).map((arg) => {
  const m = /^([a-z0-9-]{1,63})=([0-9]{1,5})$/.exec(arg);
  if (!m) {
    console.error(`usage: vcluster-standin.mjs <name>=<port>...  (got ${JSON.stringify(arg)})`);
    process.exit(64);
  }
  return { name: m[1], port: Number(m[2]) };
});
if (specs.length === 0) {
  console.error('usage: vcluster-standin.mjs <name>=<port>...');
  process.exit(64);
}

const servers = await Promise.all(
  specs.map(
    ({ name, port }) =>
      new Promise((resolve, reject) => {
        const server = createServer(selfSignedKeyPair(name), (req, res) => {
          const sni = req.socket.servername || '(none)';
          console.log(`[${name}] ${req.method} ${req.url} (SNI ${sni})`);
          if (req.method === 'GET' && (req.url === '/version' || req.url === '/version/')) {
            res.setHeader('content-type', 'application/json');
            const version = {
              major: '1',
              minor: '31',
              gitVersion: `v1.31.0+standin-${name}`,
              cluster: name,
              sni,
            };
            res.end(`${JSON.stringify(version)}\n`);
            return;
          }
          res.statusCode = 404;
          res.setHeader('content-type', 'application/json');
          res.end('{"kind":"Status","status":"Failure","reason":"NotFound","code":404}\n');
        });
        server.once('error', reject);
        // Loopback only: nothing else on the network can reach a stand-in.
        server.listen(port, '127.0.0.1', () => {
          console.log(`ready ${name} ${port}`);
          resolve(server);
        });
      }),
  ),
).catch((err) => {
  console.error(`vcluster-standin: ${err.message}`);
  process.exit(1);
});

for (const signal of ['SIGTERM', 'SIGINT']) {
  process.once(signal, () => {
    for (const s of servers) {
      s.close();
      s.closeAllConnections();
    }
  });
}
