/** Polls `predicate` until it holds; throws after `timeoutMs` naming `what` was awaited. */
export async function waitFor(
  predicate: () => boolean,
  timeoutMs: number,
  what: string,
  everyMs = 25,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!predicate()) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}
