import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { RawState } from '../../src/haproxy/model.js';
import { DEFAULTS_NAME, renderOwnedFile } from '../../src/providers/haproxy/owned-file.js';
import { OwnedFileCache } from '../../src/providers/haproxy/read.js';
import { ownerTags, ownFrontend } from '../support/owner.js';

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

const state = (port: number): RawState => ({
  frontends: [ownFrontend()],
  backends: [
    {
      name: 'kubebyon_a_0123456789ab',
      balance: 'leastconn',
      servers: [{ name: 'srv1', address: '127.0.0.1', port, check: true, tags: ownerTags() }],
      tags: ownerTags('a'),
    },
  ],
});

function ownedFile(s: RawState): { cache: OwnedFileCache; path: string; text: string } {
  const dir = mkdtempSync(join(tmpdir(), 'owned-cache-'));
  dirs.push(dir);
  const path = join(dir, 'kubebyon.cfg');
  const text = renderOwnedFile(s, DEFAULTS_NAME, dir);
  writeFileSync(path, text);
  return { cache: new OwnedFileCache(path, DEFAULTS_NAME, dir), path, text };
}

describe('the owned file as last read', () => {
  it('keeps the objects it is told the file holds, not a second parsed copy of them', async () => {
    const { cache, text } = ownedFile(state(30001));
    const parsed = (await cache.read()).parsed.state;
    // The same text, objects that live on elsewhere (a reading's state): those are kept from now on.
    const live = state(30001);
    cache.remember(text, live);
    const again = await cache.read();
    expect(again.parsed.state).toBe(live);
    expect(again.parsed.state).not.toBe(parsed);
    expect(again.text).toBe(text);
  });

  it('parses the file again once it changed under the objects it keeps', async () => {
    const { cache, path, text } = ownedFile(state(30001));
    await cache.read();
    cache.remember(text, state(30001));
    const edited = renderOwnedFile(state(30002), DEFAULTS_NAME, join(path, '..'));
    // Another inode, as every write of ours and any editor's rename makes.
    rmSync(path);
    writeFileSync(path, edited);
    const after = await cache.read();
    expect(after.text).toBe(edited);
    expect(after.parsed.state.backends[0]?.servers[0]?.port).toBe(30002);
  });
});
