import type { Clock } from "../../shared/index.ts";

/**
 * GitHub delivers a webhook at least once: redeliveries (manual or after a timeout) reuse the
 * X-GitHub-Delivery id. This remembers ids for `ttlMs` and at most `maxEntries` of them (oldest
 * forgotten first), so memory stays bounded whatever a sender does. Events must still be handled
 * idempotently; this only saves work.
 */
export interface DeliveryDeduplicatorOptions {
  readonly ttlMs?: number;
  readonly maxEntries?: number;
}

export class DeliveryDeduplicator {
  readonly #seen = new Map<string, number>();
  readonly #clock: Clock;
  readonly #ttlMs: number;
  readonly #maxEntries: number;

  constructor(clock: Clock, options: DeliveryDeduplicatorOptions = {}) {
    this.#clock = clock;
    this.#ttlMs = options.ttlMs ?? 60 * 60_000;
    this.#maxEntries = options.maxEntries ?? 10_000;
  }

  /** True the first time an id is seen (within the TTL), false for a repeat. */
  firstDelivery(deliveryId: string): boolean {
    const now = this.#clock.now();
    this.#expire(now);
    if (this.#seen.has(deliveryId)) return false;
    this.#seen.set(deliveryId, now);
    while (this.#seen.size > this.#maxEntries) {
      const oldest = this.#seen.keys().next().value;
      if (oldest === undefined) break;
      this.#seen.delete(oldest);
    }
    return true;
  }

  get size(): number {
    return this.#seen.size;
  }

  // Map iteration is insertion order, which is time order here: stop at the first live entry.
  #expire(now: number): void {
    for (const [id, at] of this.#seen) {
      if (now - at < this.#ttlMs) break;
      this.#seen.delete(id);
    }
  }
}
