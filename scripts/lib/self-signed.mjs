// A throw-away self-signed certificate made with the openssl CLI (nothing secret is committed). Plain ESM so
// that a script run by `node` (scripts/demo/vcluster-standin.mjs) and the TypeScript tests share it.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** An EC P-256 key and a one-day certificate for `/CN=<commonName>`, as PEM buffers. */
export function selfSignedKeyPair(commonName) {
  const dir = mkdtempSync(join(tmpdir(), 'kubebyon-tls-'));
  try {
    execFileSync(
      'openssl',
      [
        'req',
        '-x509',
        '-newkey',
        'ec',
        '-pkeyopt',
        'ec_paramgen_curve:prime256v1',
        '-nodes',
        '-keyout',
        join(dir, 'key.pem'),
        '-out',
        join(dir, 'cert.pem'),
        '-days',
        '1',
        '-subj',
        `/CN=${commonName}`,
      ],
      { stdio: 'ignore' },
    );
    return { key: readFileSync(join(dir, 'key.pem')), cert: readFileSync(join(dir, 'cert.pem')) };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
