import { mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ClusterStore } from '../../src/store/cluster-store.js';
import { SeenSignatures } from '../../src/webhook/seen-signatures.js';

// A kill -9 between writing a file's new version and renaming it over the file leaves the temporary file;
// the fault suite found them piling up beside the owned HAProxy file and the state.
describe('temporary files of a killed write', () => {
  let dir: string;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'kubebyon-tmp-'));
  });
  afterEach(() => {
    rmSync(dir, { recursive: true, force: true });
  });

  it('are removed when the store and the seen signatures open, and nothing else is', async () => {
    const files = [
      '.state.json.4242.1796234595391.tmp',
      '.state.json.1.1796234598158.tmp',
      '.state.json.replay.77.1796234598158.tmp',
      // Not ours: another file's temporaries, and names that only look alike.
      '.other.json.4242.1796234595391.tmp',
      'state.json.4242.1.tmp',
      '.state.json.notes.tmp',
    ];
    for (const f of files) writeFileSync(join(dir, f), 'partial');
    await ClusterStore.open(join(dir, 'state.json'));
    await SeenSignatures.open(join(dir, 'state.json.replay'), 300, Date.now() / 1000);
    expect(readdirSync(dir).sort()).toEqual(
      [
        '.other.json.4242.1796234595391.tmp',
        '.state.json.notes.tmp',
        'state.json.4242.1.tmp',
        'state.json.replay',
      ].sort(),
    );
  });
});
