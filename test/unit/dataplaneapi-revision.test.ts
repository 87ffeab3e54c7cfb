import { describe, expect, it } from 'vitest';
import type { ConfigReads } from '../../src/providers/dataplaneapi/read.js';
import type { Workers } from '../../src/providers/dataplaneapi/reload.js';
import { Revision } from '../../src/providers/dataplaneapi/revision.js';

/** A worker whose runtime info answers with `header` as its `Configuration-Version` (or none). */
function bed(start: { header: number | undefined; version: number }) {
  const state = { ...start, infoCalls: 0, versionCalls: 0 };
  const workers = {
    lastGeneration: '7.1',
    current: async () => {
      state.infoCalls++;
      return { pid: 7, generation: '7.1', version: state.header };
    },
  } as unknown as Workers;
  const reads = {
    version: async () => {
      state.versionCalls++;
      return state.version;
    },
  } as unknown as ConfigReads;
  return { state, revision: new Revision(workers, reads) };
}

const look = (r: Revision) => r.now(new AbortController().signal, { requests: 0 });

describe("Revision: the provider's token of who ran and who wrote", () => {
  it('takes the version from the runtime answer header: one request per look', async () => {
    const { state, revision } = bed({ header: 4, version: 4 });
    expect(await look(revision)).toBe('7.1:0');
    expect(await look(revision)).toBe('7.1:0');
    expect(state).toMatchObject({ infoCalls: 2, versionCalls: 0 });
    // Someone else wrote: the header moved, and the token with it.
    state.header = 5;
    expect(await look(revision)).toBe('7.1:1');
  });

  it('asks for the version when the answer has no header, and still sees a foreign write', async () => {
    const { state, revision } = bed({ header: undefined, version: 4 });
    expect(await look(revision)).toBe('7.1:0');
    expect(state).toMatchObject({ infoCalls: 1, versionCalls: 1 });
    state.version = 6;
    expect(await look(revision)).toBe('7.1:1');
  });

  it('counts neither our own write nor a version seen across a persistence as foreign', async () => {
    const { state, revision } = bed({ header: 4, version: 4 });
    await look(revision);
    state.header = 5;
    revision.wrote(5);
    expect(await look(revision)).toBe('7.1:0');
    // During a persistence of ours, no request: the token is the last one seen.
    let during = '';
    await revision.persist(async () => {
      state.header = 6;
      during = await look(revision);
    });
    expect(during).toBe('7.1:0');
    expect(state.infoCalls).toBe(2);
  });
});
