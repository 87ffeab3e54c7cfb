/**
 * The timeout of every property test (fast-check): each is sized by work (a fixed number of runs), which
 * takes about 1-4 s on an idle 2-core machine; a slower or busier machine must not fail it by the clock.
 */
export const PROPERTY_TIMEOUT_MS = 120_000;
