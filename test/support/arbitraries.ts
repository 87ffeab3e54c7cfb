import fc from 'fast-check';

// Loopback endpoints only: the same claims drive real HAProxy containers, whose health checks must stay local.
const octet = fc.integer({ min: 0, max: 3 });
export const endpointArb = fc.record({
  address: fc.oneof(
    octet.map((o) => `127.0.0.${o + 1}`),
    fc.constant('::1'),
  ),
  port: fc.integer({ min: 30000, max: 30003 }),
});
export const clusterArb = fc.constantFrom('a', 'b', 'c', 'd', 'e', 'f');
export const hostArb = fc.constantFrom(
  'a.example.com',
  'b.example.com',
  'c.example.com',
  'd.example.com',
  'e.example.com',
);
/** Claims as kubebyon-api would make them: one per cluster, hosts sometimes contested. */
export const claimsArb = fc
  .array(
    fc.record({
      cluster: clusterArb,
      host: hostArb,
      endpoints: fc.uniqueArray(endpointArb, {
        maxLength: 4,
        selector: (e) => `${e.address}|${e.port}`,
      }),
      claimedAt: fc.nat(5),
    }),
    { maxLength: 6 },
  )
  .map((claims) => [...new Map(claims.map((c) => [c.cluster, c])).values()]);
