import { backoffDelay, systemClock, type BackoffPolicy, type Clock } from "../shared/index.ts";
import { DEFAULT_QUEUE_RATE_LIMIT, TokenBucket, type RateLimit } from "./token-bucket.ts";

/**
 * Per-key failure backoff for reconcile errors: 100 ms doubling to 5 min, no attempt limit (the
 * queue never gives up on a key; terminal errors are the way out). Jitter is off so the schedule
 * is predictable; keys fail at different times anyway.
 */
export const DEFAULT_RECONCILE_BACKOFF: BackoffPolicy = {
  baseMs: 100,
  factor: 2,
  capMs: 5 * 60_000,
  jitter: 0,
  maxAttempts: Infinity,
};

export interface WorkQueueOptions {
  readonly clock?: Clock;
  readonly backoff?: BackoffPolicy;
  /** Overall limit on `addRateLimited`, shared by all keys. Default 10 qps, burst 100. */
  readonly rateLimit?: RateLimit;
  readonly random?: () => number;
}

/**
 * A rate-limited work queue of keys with client-go's guarantees:
 * - a key is queued at most once however often it is added (dirty set);
 * - a key is never handed out while a previous `get()` of it has not been `done()`; adding it in
 *   that window re-queues it exactly once, after `done()`;
 * - `addRateLimited` delays by the larger of the key's own exponential backoff (`forget` resets
 *   it) and the wait for a token from one bucket shared by all keys (client-go's
 *   `MaxOfRateLimiter(itemExponential, bucket)`), so a mass failure is retried at `qps`, not at once;
 *   `add` and `addAfter` are not rate-limited;
 * - `addAfter` uses the injected Clock, and keeps only the earliest pending time per key.
 * After `shutDown()` adds are ignored, waiting `get()`s return undefined, queued keys are dropped
 * and `drained()` resolves once every handed-out key is `done()`.
 */
export class WorkQueue {
  readonly #clock: Clock;
  readonly #backoff: BackoffPolicy;
  readonly #random: () => number;
  readonly #bucket: TokenBucket;
  readonly #stop = new AbortController();
  #queue: string[] = [];
  readonly #dirty = new Set<string>();
  readonly #processing = new Set<string>();
  readonly #failures = new Map<string, number>();
  /** Earliest pending `addAfter` time per key. */
  readonly #waiting = new Map<string, number>();
  #getters: Array<() => void> = [];
  #drainWaiters: Array<() => void> = [];

  constructor(options: WorkQueueOptions = {}) {
    this.#clock = options.clock ?? systemClock;
    this.#backoff = options.backoff ?? DEFAULT_RECONCILE_BACKOFF;
    this.#random = options.random ?? Math.random;
    this.#bucket = new TokenBucket(options.rateLimit ?? DEFAULT_QUEUE_RATE_LIMIT, this.#clock);
  }

  /** Queues `key` unless it is already queued. Idempotent; a no-op after shutdown. */
  add(key: string): void {
    if (this.#stop.signal.aborted || this.#dirty.has(key)) return;
    this.#dirty.add(key);
    if (this.#processing.has(key)) return; // re-queued by done()
    this.#enqueue(key);
  }

  /** Queues `key` after `ms` on the injected clock. A later, longer delay does not postpone an earlier one. */
  addAfter(key: string, ms: number): void {
    if (this.#stop.signal.aborted) return;
    if (ms <= 0) {
      this.add(key);
      return;
    }
    const readyAt = this.#clock.now() + ms;
    const pending = this.#waiting.get(key);
    if (pending !== undefined && pending <= readyAt) return;
    this.#waiting.set(key, readyAt);
    this.#clock.sleep(ms, this.#stop.signal).then(
      () => {
        if (this.#waiting.get(key) !== readyAt) return; // superseded by an earlier addAfter
        this.#waiting.delete(key);
        this.add(key);
      },
      () => undefined, // aborted by shutDown(): the pending add is meant to be dropped
    );
  }

  /**
   * Counts a failure for `key` and queues it after max(its next backoff delay, the wait for an
   * overall token). Every call takes a token, as in client-go.
   */
  addRateLimited(key: string): void {
    if (this.#stop.signal.aborted) return;
    const failures = (this.#failures.get(key) ?? 0) + 1;
    this.#failures.set(key, failures);
    this.addAfter(key, Math.max(backoffDelay(this.#backoff, failures, this.#random), this.#bucket.reserve()));
  }

  /** Resets `key`'s backoff; call after a success or when giving up on the key. */
  forget(key: string): void {
    this.#failures.delete(key);
  }

  /** Failures counted for `key` since the last `forget`. */
  numRequeues(key: string): number {
    return this.#failures.get(key) ?? 0;
  }

  /**
   * Next key to work on; waits while the queue is empty. Resolves undefined once shut down. The
   * caller owns the key until it calls `done(key)`.
   */
  async get(): Promise<string | undefined> {
    for (;;) {
      if (this.#stop.signal.aborted) return undefined;
      const key = this.#queue.shift();
      if (key !== undefined) return this.#take(key);
      // Woken by #enqueue or shutDown; the key is taken only when this worker runs, so adds that
      // happen before then still de-duplicate against the queued key.
      await new Promise<void>((resolve) => this.#getters.push(resolve));
    }
  }

  /** Marks `key` finished; if it was added meanwhile it goes back into the queue. */
  done(key: string): void {
    this.#processing.delete(key);
    if (this.#dirty.has(key) && !this.#stop.signal.aborted) this.#enqueue(key);
    if (this.#processing.size === 0) {
      for (const wake of this.#drainWaiters.splice(0)) wake();
    }
  }

  /** Keys ready to be handed out (the `queue depth` metric). */
  get length(): number {
    return this.#queue.length;
  }

  /** Keys waiting for an `addAfter`/`addRateLimited` delay. */
  get delayedCount(): number {
    return this.#waiting.size;
  }

  get processingCount(): number {
    return this.#processing.size;
  }

  get shuttingDown(): boolean {
    return this.#stop.signal.aborted;
  }

  /** Stops the queue: see the class contract. Idempotent. */
  shutDown(): void {
    if (this.#stop.signal.aborted) return;
    this.#stop.abort();
    this.#queue = [];
    this.#dirty.clear();
    this.#waiting.clear();
    for (const wake of this.#getters.splice(0)) wake();
  }

  /** Resolves once no key is being processed (immediately if none is). */
  drained(): Promise<void> {
    if (this.#processing.size === 0) return Promise.resolve();
    return new Promise((resolve) => this.#drainWaiters.push(resolve));
  }

  /** `shutDown()` then wait for in-flight keys. */
  async shutDownWithDrain(): Promise<void> {
    this.shutDown();
    await this.drained();
  }

  #enqueue(key: string): void {
    this.#queue.push(key);
    this.#getters.shift()?.();
  }

  #take(key: string): string {
    this.#dirty.delete(key);
    this.#processing.add(key);
    return key;
  }
}
