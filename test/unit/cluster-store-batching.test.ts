import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { ClusterStore } from '../../src/store/cluster-store.js';
import { Journal } from '../../src/store/journal.js';

// Counts the store's journal appends while keeping the real ones.
const writes = vi.spyOn(Journal.prototype, 'append');

describe('ClusterStore group commit', () => {
  let dir: string;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'kubebyon-store-batch-'));
    writes.mockClear();
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it('writes a burst of concurrent changes in a few writes, and acknowledges each only once on disk', async () => {
    const path = join(dir, 'clusters.json');
    const store = await ClusterStore.open(path);
    const results = await Promise.all(
      Array.from({ length: 100 }, (_, i) =>
        store.upsert({ name: `c${i}`, host: `c${i}.example.com`, target: { nodePort: 30000 + i } }),
      ),
    );
    expect(results.map((r) => r.name)).toEqual(Array.from({ length: 100 }, (_, i) => `c${i}`));
    // The first change starts a write at once; the other 99 wait for it and share the next one.
    expect(writes).toHaveBeenCalledTimes(2);
    expect((await ClusterStore.open(path)).list()).toHaveLength(100);
  });

  it('applies changes of one batch in the order they were made', async () => {
    const store = await ClusterStore.open(join(dir, 'clusters.json'));
    const [, , removed] = await Promise.all([
      store.upsert({ name: 'a', host: 'a.example.com', target: { nodePort: 1 } }),
      store.upsert({ name: 'a', host: 'a.example.com', target: { nodePort: 2 } }),
      store.delete('a'),
      store.upsert({ name: 'b', host: 'b.example.com', target: { nodePort: 3 } }),
    ]);
    expect(removed).toBe(true);
    expect(store.list().map((c) => c.name)).toEqual(['b']);
  });
});
