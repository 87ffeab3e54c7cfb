import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { LegacyMapPlace } from './legacy-map-install.js';

const FIXTURES = join(import.meta.dirname, '../fixtures/legacy-allow-map');
/** What test/fixtures/legacy-allow-map/make.sh fixed, for the test's own to take their place. */
const MADE = { dir: '/tmp/kubebyon-legacy-allow-map', sni: 24444, alpha: 31011, beta: 31012 };

/**
 * The clusters of the install: name -> host, which stand-in server (`alpha`, `beta`) it routes to, and the
 * authorized networks it was PUT with (none: open to all).
 */
export const LEGACY_ALLOW_CLUSTERS = [
  { name: 'u0', host: 'api.u0.example.com', server: 'alpha', networks: ['127.0.0.1/32'] },
  { name: 'u1', host: 'api.u1.example.com', server: 'beta', networks: [] },
  { name: 'u2', host: 'api.u2.example.com', server: 'alpha', networks: ['198.18.0.0/24', '127.0.0.1/32'] },
  { name: 'u3', host: 'api.u3.example.com', server: 'beta', networks: [] },
] as const;

/**
 * Puts the install release 218dbda left with authorized networks in use (its owned file with the SNI
 * frontend's `kb_allowed` lines, its SNI map file, its one allow map file `<owner>.allow.map` and its state
 * file, as its own service wrote them: test/fixtures/legacy-allow-map/make.sh) in `place`, with the place's
 * folder, SNI port and servers' ports instead of those it was made with. Returns the owned file's text (the
 * caller loads it).
 */
export function writeLegacyAllowMapInstall(place: LegacyMapPlace): string {
  const swap = (text: string) =>
    text
      .replaceAll(MADE.dir, place.dir)
      .replaceAll(`127.0.0.1:${MADE.sni}`, `127.0.0.1:${place.sniPort}`)
      .replaceAll(`127.0.0.1:${MADE.alpha}`, `127.0.0.1:${place.ports.alpha}`)
      .replaceAll(`127.0.0.1:${MADE.beta}`, `127.0.0.1:${place.ports.beta}`)
      .replaceAll(`"nodePort":${MADE.alpha}`, `"nodePort":${place.ports.alpha}`)
      .replaceAll(`"nodePort":${MADE.beta}`, `"nodePort":${place.ports.beta}`);
  for (const file of readdirSync(FIXTURES).filter((f) => f.endsWith('.map')))
    writeFileSync(join(place.dir, file), swap(readFileSync(join(FIXTURES, file), 'utf8')));
  // The store as that release left it: `clusters.json` and its journal, whichever it had written.
  for (const file of readdirSync(FIXTURES).filter((f) => f.startsWith('clusters.json')))
    writeFileSync(
      `${place.stateFile}${file.slice('clusters.json'.length)}`,
      swap(readFileSync(join(FIXTURES, file), 'utf8')),
    );
  const owned = swap(readFileSync(join(FIXTURES, 'kubebyon.cfg'), 'utf8'));
  for (const [what, port] of Object.entries(MADE))
    if (what !== 'dir' && owned.includes(`:${port}`)) throw new Error(`${port} left in the owned file`);
  if (owned.includes(MADE.dir)) throw new Error(`${MADE.dir} left in the owned file`);
  return owned;
}
