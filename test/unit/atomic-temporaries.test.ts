import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { writeFileAtomic } from '../../src/store/atomic-file.js';
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
        // The store's journal, opened (created empty) with it.
        'state.json.journal',
        'state.json.replay',
      ].sort(),
    );
  });

  it('of a file nothing opened are removed before the first write to it, and only then', async () => {
    const file = join(dir, 'other.json');
    writeFileSync(join(dir, '.other.json.4242.1796234595391.tmp'), 'partial');
    await writeFileAtomic(file, 'one\n');
    expect(readdirSync(dir)).toEqual(['other.json']);
    // Later, a temporary beside it may be a write of this process under way: left alone.
    writeFileSync(join(dir, '.other.json.4243.1796234595392.tmp'), 'in flight');
    await writeFileAtomic(file, 'two\n');
    expect(readdirSync(dir).sort()).toEqual(['.other.json.4243.1796234595392.tmp', 'other.json']);
  });

  it('writes buffers one after the other, more of them than one gathered write takes, and leaves no temporary', async () => {
    const path = join(dir, 'allow.map');
    writeFileSync(path, 'old\n');
    // 5000 chunks (a gathered write takes at most 1024 on Linux), some empty, of varied lengths.
    const chunks = Array.from({ length: 5000 }, (_, i) =>
      Buffer.from(i % 7 === 0 ? '' : `198.18.${i >> 8}.${i & 255}/32|kb_slot_${i} 1\n`.repeat(1 + (i % 3))),
    );
    await writeFileAtomic(path, chunks, 0o640);
    expect(readFileSync(path)).toEqual(Buffer.concat(chunks));
    expect(statSync(path).mode & 0o777).toBe(0o640);
    expect(readdirSync(dir)).toEqual(['allow.map']);
  });
});
