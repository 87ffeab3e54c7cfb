import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

const FIXTURES = join(import.meta.dirname, '../fixtures/legacy-map');
/** What test/fixtures/legacy-map/make.sh fixed, for the test's own to take their place. */
const MADE = { dir: '/tmp/kubebyon-legacy-map', sni: 24443, alpha: 31001, beta: 31002 };

/** The clusters of the install: name -> host and which stand-in server (`alpha`, `beta`) it routes to. */
export const LEGACY_MAP_CLUSTERS = [
  { name: 'u0', host: 'api.u0.example.com', server: 'alpha' },
  { name: 'u1', host: 'api.u1.example.com', server: 'beta' },
  { name: 'u2', host: 'api.u2.example.com', server: 'alpha' },
  { name: 'u3', host: 'api.u3.example.com', server: 'beta' },
] as const;

export interface LegacyMapPlace {
  /** The folder HAProxy loads the owned file and its maps from (and mounts at the same path). */
  dir: string;
  ownedFile: string;
  stateFile: string;
  sniPort: number;
  ports: { alpha: number; beta: number };
}

/**
 * Puts the install release a653034 left with map routing (its owned file, SNI map file and state file, as
 * its own service wrote them: test/fixtures/legacy-map/make.sh) in `place`, with the place's folder, SNI port
 * and servers' ports instead of those it was made with. Returns the owned file's text (the caller loads it).
 */
export function writeLegacyMapInstall(place: LegacyMapPlace): string {
  return writeFixtureInstall(FIXTURES, MADE, place);
}

/** The folder, SNI port and servers' ports a fixture's make.sh fixed. */
export interface MadeAt {
  dir: string;
  sni: number;
  alpha: number;
  beta: number;
}

/**
 * Puts the install a fixture folder holds (an owned file `kubebyon.cfg`, its `*.map` files, the store's
 * `clusters.json*`) in `place`, with `place`'s folder and ports in place of those it was `made` with.
 * Returns the owned file's text (the caller loads it).
 */
export function writeFixtureInstall(fixtures: string, made: MadeAt, place: LegacyMapPlace): string {
  const swap = (text: string) =>
    text
      .replaceAll(made.dir, place.dir)
      .replaceAll(`127.0.0.1:${made.sni}`, `127.0.0.1:${place.sniPort}`)
      .replaceAll(`127.0.0.1:${made.alpha}`, `127.0.0.1:${place.ports.alpha}`)
      .replaceAll(`127.0.0.1:${made.beta}`, `127.0.0.1:${place.ports.beta}`)
      .replaceAll(`"nodePort":${made.alpha}`, `"nodePort":${place.ports.alpha}`)
      .replaceAll(`"nodePort":${made.beta}`, `"nodePort":${place.ports.beta}`);
  for (const file of readdirSync(fixtures).filter((f) => f.endsWith('.map')))
    writeFileSync(join(place.dir, file), swap(readFileSync(join(fixtures, file), 'utf8')));
  // The store as that release left it: `clusters.json` and its journal, whichever it had written.
  for (const file of readdirSync(fixtures).filter((f) => f.startsWith('clusters.json')))
    writeFileSync(
      `${place.stateFile}${file.slice('clusters.json'.length)}`,
      swap(readFileSync(join(fixtures, file), 'utf8')),
    );
  const owned = swap(readFileSync(join(fixtures, 'kubebyon.cfg'), 'utf8'));
  for (const [what, port] of Object.entries(made))
    if (what !== 'dir' && owned.includes(`:${port}`)) throw new Error(`${port} left in the owned file`);
  if (owned.includes(made.dir)) throw new Error(`${made.dir} left in the owned file`);
  return owned;
}
