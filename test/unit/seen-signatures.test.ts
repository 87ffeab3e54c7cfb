import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { RETENTION_MARGIN_SECONDS, SeenSignatures } from '../../src/webhook/seen-signatures.js';

const sig = (n: number) => `sha256=${n.toString(16).padStart(64, '0')}`;
const WINDOW = 300;
// How long a signature is kept: the window and a margin for a clock stepped back.
const KEPT = WINDOW + RETENTION_MARGIN_SECONDS;
const T = 1_700_000_000;

describe('SeenSignatures with a file', () => {
  let dir: string;
  let file: string;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'kubebyon-seen-'));
    file = join(dir, 'clusters.json.replay');
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it('refuses a signature claimed before a reopen, until its window and margin have passed', async () => {
    const first = await SeenSignatures.open(file, WINDOW, T);
    expect(await first.claim(sig(1), T, T)).toBe(true);
    expect(await first.claim(sig(1), T, T)).toBe(false);
    expect(await (await SeenSignatures.open(file, WINDOW, T + KEPT)).claim(sig(1), T, T + KEPT)).toBe(false);
    const later = await SeenSignatures.open(file, WINDOW, T + KEPT + 1);
    expect(readFileSync(file, 'utf8')).toBe('');
    expect(await later.claim(sig(1), T, T + KEPT + 1)).toBe(true);
  });

  it('still refuses a signature one second past the window, for a clock stepped back', async () => {
    const seen = await SeenSignatures.open(file, WINDOW, T);
    expect(await seen.claim(sig(5), T, T)).toBe(true);
    // Another claim at a reading past the window, then the original again.
    expect(await seen.claim(sig(6), T + WINDOW + 1, T + WINDOW + 1)).toBe(true);
    expect(await seen.claim(sig(5), T, T + WINDOW)).toBe(false);
  });

  it('grants one of two identical concurrent claims', async () => {
    const seen = await SeenSignatures.open(file, WINDOW, T);
    expect((await Promise.all([seen.claim(sig(2), T, T), seen.claim(sig(2), T, T)])).sort()).toEqual([
      false,
      true,
    ]);
  });

  it('reads past a torn last line', async () => {
    writeFileSync(file, `${T} ${sig(3)}\n${T} sha256=00ab`);
    const seen = await SeenSignatures.open(file, WINDOW, T);
    expect(await seen.claim(sig(3), T, T)).toBe(false);
    expect(await seen.claim(sig(4), T, T)).toBe(true);
    expect(await (await SeenSignatures.open(file, WINDOW, T)).claim(sig(4), T, T)).toBe(false);
  });

  it('keeps the file to about the live entries as old ones expire', async () => {
    const seen = await SeenSignatures.open(file, WINDOW, T);
    // One claim a second for 3000 s: at most KEPT + 1 are live at any time.
    for (let i = 0; i < 3000; i++) expect(await seen.claim(sig(i), T + i, T + i)).toBe(true);
    const lines = readFileSync(file, 'utf8').split('\n').filter(Boolean).length;
    expect(lines).toBeLessThanOrEqual(KEPT + 1 + 1000 + 1);
    // Still refused after the rewrite.
    expect(
      await (await SeenSignatures.open(file, WINDOW, T + 2999)).claim(sig(2999), T + 2999, T + 2999),
    ).toBe(false);
  }, 30_000); // 3,000 fsynced appends: seconds on a loaded machine.
});
