import fc from 'fast-check';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { HaproxyState, RawState } from '../../src/haproxy/model.js';
import { type RenderOptions, renderDesired } from '../../src/haproxy/render.js';
import { type Plan, plan } from '../../src/plan/plan.js';
import type { Reading } from '../../src/plan/reading.js';
import type { Provider } from '../../src/providers/provider.js';
import { OwnedProvider } from '../../src/registry/owned-provider.js';
import { compareStrings, resolveRoutes } from '../../src/routes/route.js';
import { claimsArb } from '../support/arbitraries.js';
import { interpret, isOwned, registry } from '../support/owner.js';
import { applyToState } from './oracle.js';

export interface ProviderUnderTest {
  provider: Provider;
  /** Why this provider cannot run here (e.g. an API version without a feature it needs): its tests skip. */
  skip?: string;
  /** How to render for this provider (a real HAProxy binds a free loopback port). */
  render: RenderOptions;
  /** Brings HAProxy back to its fixture: foreign objects only, none of ours. */
  reset(): Promise<void>;
  cleanup(): Promise<void>;
  /**
   * A new provider that shares nothing with `provider`: reads back what HAProxy holds, where `provider` may
   * answer from what it remembers of its own writes.
   */
  fresh?(): Provider;
  /**
   * Waits until what `provider` changed at runtime is in the files HAProxy loads, when it writes them later
   * (the Data Plane API's runtime servers carry no health-check flag of their own: a fresh reader learns it
   * from the file).
   */
  persisted?(): Promise<void>;
}

export interface ContractOptions {
  /** Random plan sequences to try (each step of a real provider is a reload). */
  runs: number;
  timeoutMs?: number;
}

const signal = () => AbortSignal.timeout(60_000);

/** The planner's view of a state: no tags (how each provider stores them is its own), sorted by name. */
export interface Canonical {
  frontends: unknown[];
  backends: unknown[];
  maps?: Array<{ name: string; entries: Map<string, string> }>;
}

/** Sorted by name and without tags, so that two reads of one configuration compare equal however listed. */
export function canonical(state: HaproxyState): Canonical {
  const byName = <T extends { name: string }>(a: T, b: T) => compareStrings(a.name, b.name);
  const out: Canonical = {
    frontends: [...state.frontends].sort(byName).map(({ tags: _, rules, sniMap, ...f }) => ({
      ...f,
      ...(sniMap ? { sniMap } : {}),
      rules: rules.map(({ backend, host, owned }) => ({ backend, host, owned })),
    })),
    backends: [...state.backends].sort(byName).map(({ tags: _, servers, ...b }) => ({
      ...b,
      servers: [...servers]
        .sort(byName)
        .map(({ name, address, port, check, owned }) => ({ name, address, port, check, owned })),
    })),
  };
  // Map routing: the maps of owned frontends, entries by host (an empty list of maps is no map).
  if (state.maps && state.maps.length > 0)
    out.maps = [...state.maps]
      .map((m) => ({
        name: m.name,
        entries: new Map([...m.entries].sort(([a], [b]) => compareStrings(a, b))),
      }))
      .sort(byName);
  return out;
}

function foreignOf(raw: RawState): Canonical {
  return canonical(
    interpret({
      frontends: raw.frontends.filter((f) => !isOwned(f.tags)),
      backends: raw.backends.filter((b) => !isOwned(b.tags)),
    }),
  );
}

const stepsArb = fc.array(claimsArb, { minLength: 1, maxLength: 3 });

/**
 * The contract every provider must pass (external-dns keeps a strict reference provider for the same reason):
 * random plans applied through `apply` read back as the oracle's `applyToState` says they should; foreign
 * objects never change; an empty plan writes nothing; an aborted or refused apply leaves HAProxy as it was.
 * The provider runs behind the registry (`OwnedProvider`), as the service runs it.
 */
export function describeProvider(
  name: string,
  make: () => Promise<ProviderUnderTest>,
  options: ContractOptions,
): void {
  describe(`provider contract: ${name}`, () => {
    let t: ProviderUnderTest;
    let owned: OwnedProvider;
    const timeout = options.timeoutMs ?? 5_000;
    const read = async () => canonical((await owned.read(signal())).state);
    const rawRead = async () => (await t.provider.read(signal())).raw;
    /** A plan and the reading it was made from, as a pass hands both to `apply`. */
    const planFor = async (
      claims: Parameters<typeof resolveRoutes>[0],
    ): Promise<{ p: Plan; current: Reading }> => {
      const current = await owned.read(signal());
      return { p: plan(renderDesired(resolveRoutes(claims).routes, t.render), current.state), current };
    };

    beforeAll(async () => {
      t = await make();
      owned = new OwnedProvider(t.provider, registry);
    }, 120_000);
    afterAll(async () => {
      await t?.cleanup();
    }, 60_000);
    beforeEach((ctx) => {
      if (t?.skip) ctx.skip(t.skip);
    });

    it(
      'reads back exactly what applyToState says each random plan means, never changing foreign objects',
      async () => {
        await fc.assert(
          fc.asyncProperty(stepsArb, async (steps) => {
            await t.reset();
            const foreign = foreignOf(await rawRead());
            for (const claims of steps) {
              const before = (await owned.read(signal(), { fresh: true })).state;
              const { p, current } = await planFor(claims);
              await owned.apply(p, current, signal());
              const expected = canonical(applyToState(before, p.operations));
              expect(await read()).toEqual(expected);
              if (t.fresh) {
                await t.persisted?.();
                const fresh = new OwnedProvider(t.fresh(), registry);
                // A second reader only looks: it must not write files behind the provider under test.
                expect(canonical((await fresh.read(signal(), { settle: false })).state)).toEqual(expected);
              }
              expect(foreignOf(await rawRead())).toEqual(foreign);
              // Applied means converged: planning again finds nothing to do.
              expect((await planFor(claims)).p.operations).toEqual([]);
            }
          }),
          { numRuns: options.runs },
        );
      },
      timeout * options.runs * 3 + 30_000,
    );

    it(
      'writes nothing for an empty plan',
      async () => {
        await t.reset();
        const before = await owned.read(signal(), { fresh: true });
        const report = await owned.apply({ operations: [], conflicts: [] }, before, signal());
        expect(report).toMatchObject({ reload: 'none', requests: 0 });
        expect(canonical((await owned.read(signal(), { fresh: true })).state)).toEqual(
          canonical(before.state),
        );
      },
      timeout,
    );

    it(
      'leaves HAProxy as it was when the apply is aborted before it starts',
      async () => {
        await t.reset();
        const before = canonical((await owned.read(signal(), { fresh: true })).state);
        const { p, current } = await planFor([
          { cluster: 'aborted', host: 'aborted.example.com', endpoints: [], claimedAt: 0 },
        ]);
        const controller = new AbortController();
        controller.abort(new Error('shutting down'));
        await expect(owned.apply(p, current, controller.signal)).rejects.toThrow();
        expect(canonical((await owned.read(signal(), { fresh: true })).state)).toEqual(before);
      },
      timeout,
    );

    it(
      'refuses an operation on an object it does not own, and changes nothing',
      async () => {
        await t.reset();
        const current = await owned.read(signal(), { fresh: true });
        const foreign = current.state.backends.find((b) => !b.owned);
        expect(foreign, 'the fixture has a foreign backend').toBeDefined();
        const before = canonical(current.state);
        await expect(
          owned.apply(
            { operations: [{ kind: 'delete_backend', name: foreign?.name ?? '' }], conflicts: [] },
            current,
            signal(),
          ),
        ).rejects.toThrow();
        expect(canonical((await owned.read(signal(), { fresh: true })).state)).toEqual(before);
      },
      timeout,
    );
  });
}
