/**
 * Time is injected everywhere it matters (backoff, requeue, timeouts, TTLs) so that decision logic
 * can be driven by a FakeClock in tests.
 */
export interface Clock {
  /** Milliseconds since the epoch. */
  now(): number;
  /** Resolves after `ms`; rejects with the signal's reason if aborted first. */
  sleep(ms: number, signal?: AbortSignal): Promise<void>;
}

export const systemClock: Clock = {
  now: () => Date.now(),
  sleep: (ms, signal) =>
    new Promise<void>((resolve, reject) => {
      if (signal?.aborted) {
        reject(signal.reason);
        return;
      }
      const onAbort = (): void => {
        clearTimeout(timer);
        reject(signal?.reason);
      };
      const timer = setTimeout(() => {
        signal?.removeEventListener("abort", onAbort);
        resolve();
      }, ms);
      signal?.addEventListener("abort", onAbort, { once: true });
    }),
};

interface Sleeper {
  readonly wakeAt: number;
  readonly resolve: () => void;
}

/** A clock that moves only when told to. `advance()` wakes sleepers in wake-time order. */
export class FakeClock implements Clock {
  #now: number;
  #sleepers: Sleeper[] = [];

  constructor(startMs = 1_700_000_000_000) {
    this.#now = startMs;
  }

  now(): number {
    return this.#now;
  }

  sleep(ms: number, signal?: AbortSignal): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      if (signal?.aborted) {
        reject(signal.reason);
        return;
      }
      const sleeper: Sleeper = { wakeAt: this.#now + Math.max(0, ms), resolve };
      this.#sleepers.push(sleeper);
      signal?.addEventListener(
        "abort",
        () => {
          this.#sleepers = this.#sleepers.filter((s) => s !== sleeper);
          reject(signal.reason);
        },
        { once: true },
      );
    });
  }

  /** Number of pending sleeps; lets a test wait until code under test has gone to sleep. */
  get pendingSleeps(): number {
    return this.#sleepers.length;
  }

  /**
   * Moves time forward, resolving due sleepers and letting their continuations run. It first lets
   * already-queued work settle, so a sleep that code is about to start is not jumped over.
   */
  async advance(ms: number): Promise<void> {
    const target = this.#now + ms;
    await new Promise<void>((r) => setImmediate(r));
    for (;;) {
      const due = this.#sleepers.filter((s) => s.wakeAt <= target).sort((a, b) => a.wakeAt - b.wakeAt)[0];
      if (due === undefined) break;
      this.#sleepers = this.#sleepers.filter((s) => s !== due);
      this.#now = Math.max(this.#now, due.wakeAt);
      due.resolve();
      await new Promise<void>((r) => setImmediate(r));
    }
    this.#now = target;
  }
}
