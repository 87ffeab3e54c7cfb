import type { Logger } from 'pino';
import { Backoff } from '../timing/backoff.js';
import type { Clock } from '../timing/clock.js';
import type { FailureKind } from './pass.js';

/** The longest wait the backoff grows to. */
export const MAX_BACKOFF_MS = 30_000;
const PING_TIMEOUT_MS = 5_000;

export interface RequeueOptions {
  clock: Clock;
  /** The first wait after a failed pass; 0 disables trying again by itself. */
  baseMs: number;
  /** How often HAProxy is pinged while it does not answer; 0 disables the probe. */
  probeMs: number;
  ping(signal: AbortSignal): Promise<unknown>;
  /** Aborts the probe's pings at shutdown. */
  signal: AbortSignal;
  /** Asks for the next pass. */
  request(reason: 'retry' | 'provider_back'): void;
  logger: Logger;
}

/**
 * The one retry rule (controller-runtime's): after a failed pass the loop asks for another by itself, with
 * exponential backoff, unless the error was terminal; then only an event or the periodic resync runs the next
 * pass. A transient failure with HAProxy seen away (a ping fails) is tried again as soon as a ping answers,
 * or when the backoff runs out, whichever comes first, once. A concurrent change that was read and planned
 * again within the pass until its `retries` ran out is backed off like a transient error, so it cannot spin.
 */
export class Requeue {
  private readonly backoff: Backoff;
  private pending: (() => void) | undefined;

  constructor(private readonly o: RequeueOptions) {
    this.backoff = new Backoff(o.baseMs, MAX_BACKOFF_MS);
  }

  /** Decides the next try after a pass; `failure` is undefined when the pass succeeded. */
  after(failure: FailureKind | undefined): void {
    this.cancel();
    if (failure === undefined || failure === 'terminal') {
      if (failure) this.o.logger.warn('not tried again until an event or the resync: retrying cannot fix it');
      this.backoff.reset();
      return;
    }
    if (this.o.baseMs <= 0) return;
    const delayMs = this.backoff.next();
    this.o.logger.info({ failure, delayMs }, 'trying the pass again after a backoff');
    let done = false;
    const fire = (reason: 'retry' | 'provider_back') => {
      if (done) return;
      this.cancel();
      this.o.request(reason);
    };
    const cancelTimer = this.o.clock.after(delayMs, () => fire('retry'));
    // A conflict means HAProxy answered: only a transient failure can be HAProxy away.
    const stopProbe = failure === 'transient' ? this.probe(() => fire('provider_back')) : () => {};
    this.pending = () => {
      done = true;
      cancelTimer();
      stopProbe();
    };
  }

  /** Drops the try planned, if any: a pass is starting anyway, or the loop stops. */
  cancel(): void {
    this.pending?.();
    this.pending = undefined;
  }

  /**
   * Pings HAProxy until it answers; calls `onBack` if it was seen away first. A provider that answers at
   * once failed for another reason (a reload HAProxy refuses), which the backoff alone paces.
   */
  private probe(onBack: () => void): () => void {
    const every = this.o.probeMs;
    if (every <= 0) return () => {};
    let stopped = false;
    let seenAway = false;
    let cancelNext: () => void;
    const tick = async () => {
      try {
        await this.o.ping(AbortSignal.any([this.o.signal, AbortSignal.timeout(PING_TIMEOUT_MS)]));
        if (stopped || !seenAway) return;
        this.o.logger.info('HAProxy answers again; reconciling now');
        onBack();
        return;
      } catch {
        seenAway = true;
      }
      if (!stopped) cancelNext = this.o.clock.after(every, () => void tick());
    };
    cancelNext = this.o.clock.after(0, () => void tick());
    return () => {
      stopped = true;
      cancelNext();
    };
  }
}
