import { join } from 'node:path';
import { type LegacyMapPlace, writeFixtureInstall } from './legacy-map-install.js';

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
  return writeFixtureInstall(FIXTURES, MADE, place);
}
