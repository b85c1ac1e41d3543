/**
 * A bounded set of small-file writes running in the background while extraction goes on (file
 * creation latency, not bandwidth, dominates small files). At most `maxInflight` writes and about
 * `maxBytes` of buffered content at once; the first failure is kept and rethrown by `drain()`.
 */
export class BackgroundWrites {
  readonly #inflight = new Set<Promise<void>>();
  readonly #maxInflight: number;
  readonly #maxBytes: number;
  #bytes = 0;
  #error: unknown;

  constructor(maxInflight: number, maxBytes: number) {
    this.#maxInflight = maxInflight;
    this.#maxBytes = maxBytes;
  }

  /** Throws the first failure of a background write, if any. */
  throwIfFailed(): void {
    if (this.#error !== undefined) throw this.#error;
  }

  /** Waits until a write of `bytes` fits the bounds, then starts `write` without waiting for it. */
  async start(bytes: number, write: () => Promise<void>): Promise<void> {
    while (this.#inflight.size >= this.#maxInflight || (this.#inflight.size > 0 && this.#bytes + bytes > this.#maxBytes)) {
      await Promise.race(this.#inflight);
    }
    this.#bytes += bytes;
    const task = write().then(
      () => undefined,
      (err: unknown) => {
        this.#error ??= err;
      },
    ).finally(() => {
      this.#bytes -= bytes;
    });
    this.#inflight.add(task);
    void task.finally(() => this.#inflight.delete(task));
  }

  /** Waits for every write in flight and rethrows the first failure. */
  async drain(): Promise<void> {
    await this.settle();
    this.throwIfFailed();
  }

  /** Like `drain()` but never throws: for cleanup after a failure. */
  async settle(): Promise<void> {
    while (this.#inflight.size > 0) await Promise.allSettled([...this.#inflight]);
  }
}
