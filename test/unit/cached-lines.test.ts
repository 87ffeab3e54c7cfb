import fc from 'fast-check';
import { Counter, Gauge, Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { CachedLinesGauge, cachingRegistry } from '../../src/metrics/cached-lines.js';
import { PROPERTY_TIMEOUT_MS } from '../support/property.js';

// route_backend_info's lines are kept between scrapes: the text must stay what prom-client prints.

const LABELS = ['cluster', 'host', 'backend'] as const;
type Labels = Record<(typeof LABELS)[number], string>;

/** The same metric both ways, next to a plain counter that goes through prom-client's own formatting. */
function pair() {
  const config = { name: 'kb_route_backend_info', help: 'Which "backend" \\ serves\neach cluster.' };
  const cached = cachingRegistry();
  const plain = new Registry();
  const a = new CachedLinesGauge({ ...config, labelNames: LABELS, registers: [cached] });
  const b = new Gauge({ ...config, labelNames: LABELS, registers: [plain] });
  for (const registers of [[cached], [plain]])
    new Counter({ name: 'kb_other_total', help: 'other', labelNames: ['x'], registers }).inc({ x: 'y' }, 2);
  return { cached, plain, a, b };
}

// Values HAProxy names never hold, but the escaping must be prom-client's for any text.
const value = fc.oneof(
  fc.constantFrom('demo', 'a"b', 'back\\slash', 'new\nline', 'ünïcode', '', '0'),
  fc.string({ maxLength: 6 }),
);
const labels = fc.record({ cluster: value, host: value, backend: value });
const op = fc.oneof(
  fc.record({ kind: fc.constant('set' as const), labels, value: fc.constantFrom(0, 1, 2.5, -1) }),
  fc.record({ kind: fc.constant('remove' as const), labels }),
  fc.record({ kind: fc.constant('reset' as const) }),
  fc.record({ kind: fc.constant('scrape' as const) }),
);

describe('CachedLinesGauge', () => {
  it(
    'prints what prom-client prints after any sequence of sets, removals, resets and scrapes',
    async () => {
      await fc.assert(
        fc.asyncProperty(fc.array(op, { maxLength: 40 }), async (ops) => {
          const { cached, plain, a, b } = pair();
          const known: Labels[] = [];
          for (const o of ops) {
            if (o.kind === 'set') {
              // Half the time a series set before (a new value for a line already formatted).
              const target = known.length > 0 && o.labels.host.length % 2 === 0 ? known[0] : o.labels;
              a.set(target as Labels, o.value);
              b.set(target as Labels, o.value);
              known.push(target as Labels);
            } else if (o.kind === 'remove') {
              // Half the time a series that exists (set before), else whatever was drawn.
              const target = known.length > 0 && o.labels.cluster.length % 2 === 0 ? known[0] : o.labels;
              a.remove(target as Labels);
              b.remove(target as Labels);
            } else if (o.kind === 'reset') {
              a.reset();
              b.reset();
            } else expect(await cached.metrics()).toBe(await plain.metrics());
          }
          expect(await cached.metrics()).toBe(await plain.metrics());
        }),
        { numRuns: 300, seed: 20261206 },
      );
    },
    PROPERTY_TIMEOUT_MS,
  );

  it('formats a series again once it is set to a new value, and drops it once removed', async () => {
    const { cached, a } = pair();
    const demo = { cluster: 'demo', host: 'api.demo.example.com', backend: 'kb_slot_1' };
    a.set(demo, 1);
    expect(await cached.metrics()).toContain(
      'kb_route_backend_info{cluster="demo",host="api.demo.example.com",backend="kb_slot_1"} 1\n',
    );
    a.set(demo, 0);
    expect(await cached.metrics()).toContain('backend="kb_slot_1"} 0\n');
    a.remove(demo);
    expect(await cached.metrics()).not.toContain('cluster="demo"');
  });

  it('takes only set, remove and reset, each series by its labels', () => {
    const { a } = pair();
    expect(() => a.inc()).toThrow(/only set, remove and reset/);
    expect(() => a.dec()).toThrow(/only set, remove and reset/);
    expect(() => a.set(1)).toThrow(/needs labels/);
    expect(() => a.remove('demo', 'api.demo.example.com', 'kb_slot_1')).toThrow(/by its labels/);
  });
});
