import type { Clock } from "./clock.ts";
import { isRetryable } from "./errors.ts";

/** Retry policy is data: every retry loop in Imp names one of these. */
export interface BackoffPolicy {
  readonly baseMs: number;
  readonly factor: number;
  readonly capMs: number;
  /** 0..1: the delay is drawn from [d*(1-jitter), d]. */
  readonly jitter: number;
  /** Attempts in total, including the first; Infinity for loops bounded by a signal instead. */
  readonly maxAttempts: number;
}

export const DEFAULT_BACKOFF: BackoffPolicy = { baseMs: 200, factor: 2, capMs: 10_000, jitter: 0.2, maxAttempts: 6 };
/** Watches and other long-lived connections: 1 s doubling to 30 s, forever (bounded by the caller's signal). */
export const RECONNECT_BACKOFF: BackoffPolicy = { baseMs: 1_000, factor: 2, capMs: 30_000, jitter: 0.2, maxAttempts: Infinity };

/** Delay before retry number `attempt` (1 = the first retry). */
export function backoffDelay(policy: BackoffPolicy, attempt: number, random: () => number = Math.random): number {
  const raw = Math.min(policy.capMs, policy.baseMs * policy.factor ** Math.max(0, attempt - 1));
  return Math.round(raw * (1 - policy.jitter * random()));
}

export interface RetryOptions {
  readonly policy?: BackoffPolicy;
  readonly clock: Clock;
  readonly signal?: AbortSignal;
  readonly isRetryable?: (err: unknown) => boolean;
  readonly onRetry?: (err: unknown, attempt: number, delayMs: number) => void;
  /** Overrides the delay for one retry (e.g. to honour a server's Retry-After); gets the policy's delay. */
  readonly delayFor?: (err: unknown, attempt: number, policyDelayMs: number) => number;
}

/** Runs `fn` until it succeeds, throws a non-retryable error, or the policy's attempts run out. */
export async function retry<T>(fn: (attempt: number) => Promise<T>, options: RetryOptions): Promise<T> {
  const policy = options.policy ?? DEFAULT_BACKOFF;
  const shouldRetry = options.isRetryable ?? isRetryable;
  for (let attempt = 1; ; attempt++) {
    options.signal?.throwIfAborted();
    try {
      return await fn(attempt);
    } catch (err) {
      if (attempt >= policy.maxAttempts || !shouldRetry(err) || options.signal?.aborted) throw err;
      const policyDelay = backoffDelay(policy, attempt);
      const delay = options.delayFor === undefined ? policyDelay : options.delayFor(err, attempt, policyDelay);
      options.onRetry?.(err, attempt, delay);
      await options.clock.sleep(delay, options.signal);
    }
  }
}
