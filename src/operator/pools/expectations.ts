/**
 * Create and delete expectations, as controller-runtime's ReplicaSet controller and ARC keep them:
 * the informer's cache lags the API server, so right after creating a VM the next reconcile may
 * not see it yet and would create it again. Each pool remembers the names it created (and deleted)
 * until the cache shows them (or shows them gone), and counts the ones not yet seen as existing.
 * An expectation expires after `ttlMs` (controller-runtime's 5 minutes), so a watch event that
 * never comes cannot block a pool for ever. Names, not counts: an event for a VM we did not create
 * can never cancel one we did.
 */
import type { Clock } from "../../shared/index.ts";

export const DEFAULT_EXPECTATION_TTL_MS = 5 * 60_000;

export class PoolExpectations {
  readonly #clock: Clock;
  readonly #ttlMs: number;
  readonly #creates = new Map<string, Map<string, number>>();
  readonly #deletes = new Map<string, Map<string, number>>();

  constructor(clock: Clock, ttlMs = DEFAULT_EXPECTATION_TTL_MS) {
    this.#clock = clock;
    this.#ttlMs = ttlMs;
  }

  expectCreated(pool: string, vmName: string): void {
    this.#entries(this.#creates, pool).set(vmName, this.#clock.now() + this.#ttlMs);
  }

  expectDeleted(pool: string, vmName: string): void {
    this.#entries(this.#deletes, pool).set(vmName, this.#clock.now() + this.#ttlMs);
  }

  /**
   * Settles what the cache now shows: created names it holds, deleted names it no longer holds (or
   * holds with a deletionTimestamp). Returns the names still expected, so the caller can count them.
   */
  settle(pool: string, inCache: ReadonlyMap<string, { readonly deleting: boolean }>): { readonly creating: readonly string[]; readonly deleting: readonly string[] } {
    const now = this.#clock.now();
    const creates = this.#entries(this.#creates, pool);
    for (const [name, expires] of creates) if (inCache.has(name) || expires <= now) creates.delete(name);
    const deletes = this.#entries(this.#deletes, pool);
    for (const [name, expires] of deletes) if (!inCache.has(name) || inCache.get(name)?.deleting === true || expires <= now) deletes.delete(name);
    return { creating: [...creates.keys()], deleting: [...deletes.keys()] };
  }

  forget(pool: string): void {
    this.#creates.delete(pool);
    this.#deletes.delete(pool);
  }

  #entries(map: Map<string, Map<string, number>>, pool: string): Map<string, number> {
    let entries = map.get(pool);
    if (entries === undefined) {
      entries = new Map();
      map.set(pool, entries);
    }
    return entries;
  }
}
