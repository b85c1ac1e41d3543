import { terminalError, type Clock } from "../shared/index.ts";

/** An overall rate: `qps` tokens a second refill a bucket of `burst` tokens. */
export interface RateLimit {
  readonly qps: number;
  readonly burst: number;
}

/**
 * client-go's default overall limit for controller queues (`workqueue.DefaultControllerRateLimiter`:
 * 10 qps, burst 100). It only matters when many keys fail at once, e.g. every object erroring
 * while the API is down: per-key backoff alone would retry all of them in the same instant.
 */
export const DEFAULT_QUEUE_RATE_LIMIT: RateLimit = { qps: 10, burst: 100 };

/**
 * A token bucket that hands out reservations, as golang.org/x/time/rate's `Reserve` does: each
 * `reserve()` takes one token now and says how long the caller must wait for it. The bucket may go
 * negative, so waiting callers are spaced 1/qps apart in the order they reserved. Starts full.
 * Pure arithmetic on the injected clock; no timers.
 */
export class TokenBucket {
  readonly #limit: RateLimit;
  readonly #clock: Clock;
  #tokens: number;
  #updatedAt: number;

  constructor(limit: RateLimit, clock: Clock) {
    if (!(limit.qps > 0) || !(limit.burst >= 1)) {
      throw terminalError("InvalidRateLimit", `Cannot configure a rate limit: need qps > 0 and burst >= 1, got ${limit.qps} qps, burst ${limit.burst}`);
    }
    this.#limit = limit;
    this.#clock = clock;
    this.#tokens = limit.burst;
    this.#updatedAt = clock.now();
  }

  /** Takes a token; returns the milliseconds until it is really available (0: now). */
  reserve(): number {
    if (this.#limit.qps === Infinity) return 0;
    this.#refill();
    this.#tokens -= 1;
    return this.#tokens >= 0 ? 0 : Math.ceil((-this.#tokens * 1_000) / this.#limit.qps);
  }

  /** Tokens available now (negative while reservations are waiting). */
  available(): number {
    if (this.#limit.qps === Infinity) return this.#limit.burst;
    this.#refill();
    return this.#tokens;
  }

  #refill(): void {
    const now = this.#clock.now();
    const elapsed = Math.max(0, now - this.#updatedAt);
    this.#tokens = Math.min(this.#limit.burst, this.#tokens + (elapsed * this.#limit.qps) / 1_000);
    this.#updatedAt = now;
  }
}
