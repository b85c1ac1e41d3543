/**
 * Pure decision for plugin-throttling's callbacks: retry a rate-limited request after GitHub's
 * Retry-After / x-ratelimit-reset, but only a bounded number of times and never for a wait longer
 * than the caller can afford (then the request fails with GitHubRateLimited and the operator's
 * queue backs off instead of holding a worker for an hour).
 */
export interface RateLimitPolicy {
  /** Retries per request for rate limits (primary and secondary together). */
  readonly maxRetries: number;
  /** Longest wait, in seconds, the adapter sleeps through itself. */
  readonly maxWaitSeconds: number;
}

export const DEFAULT_RATE_LIMIT_POLICY: RateLimitPolicy = { maxRetries: 4, maxWaitSeconds: 120 };

export type RateLimitKind = "primary" | "secondary";

export interface RateLimitDecision {
  readonly retry: boolean;
  readonly reason: string;
}

export function decideRateLimitRetry(
  policy: RateLimitPolicy,
  kind: RateLimitKind,
  retryAfterSeconds: number,
  retryCount: number,
): RateLimitDecision {
  if (retryCount >= policy.maxRetries) {
    return { retry: false, reason: `${kind} rate limit still hit after ${retryCount} retries` };
  }
  if (retryAfterSeconds > policy.maxWaitSeconds) {
    return { retry: false, reason: `${kind} rate limit asks for ${retryAfterSeconds} s, more than the ${policy.maxWaitSeconds} s allowed` };
  }
  return { retry: true, reason: `${kind} rate limit: retry ${retryCount + 1} of ${policy.maxRetries} after ${retryAfterSeconds} s` };
}
