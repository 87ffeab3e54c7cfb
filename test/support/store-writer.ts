import { spawn } from 'node:child_process';
import { join } from 'node:path';

/**
 * Runs test/fixtures/store-writer.ts on the store at `path` (`args` follow it) and kills it with SIGKILL once
 * it has written `killAfter` lines; resolves with every whole line it wrote before it died (`acked cN`,
 * `deleted cN`), so a test can check what the store kept against what it acknowledged.
 */
export async function storeWriterKilled(path: string, args: string[], killAfter: number): Promise<string[]> {
  const child = spawn(
    process.execPath,
    ['--import', 'tsx', join(import.meta.dirname, '../fixtures/store-writer.ts'), path, ...args],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  const written: string[] = [];
  await new Promise<void>((resolve, reject) => {
    child.on('error', reject);
    child.on('exit', (code, signal) =>
      signal === 'SIGKILL' ? resolve() : reject(new Error(`writer exited ${code}`)),
    );
    let buffer = '';
    child.stdout.setEncoding('utf8');
    child.stdout.on('data', (chunk: string) => {
      buffer += chunk;
      const lines = buffer.split('\n');
      buffer = lines.pop() ?? '';
      written.push(...lines);
      if (written.length >= killAfter) child.kill('SIGKILL');
    });
  });
  return written;
}
