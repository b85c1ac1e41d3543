/**
 * At most `perPool` forge writes of one pool (a runner's mint, a registration's removal) at once;
 * that pool's other VMs wait their turn here instead of holding a setup worker. GitHub paces each
 * installation's writes a second apart (plugin-throttling, docs/github.md), so the VMs of one pool
 * bound (or ended) in a burst used to take every worker and wait in that pacing while the other
 * pools' VMs waited for a worker (bench:operator: ~3.5 setups a second over 50 installations that
 * allow 50). A VM turned away is woken when a slot of its pool frees, oldest first; the caller also
 * requeues it after a while, so a wake lost to a VM that no longer needs one delays the next by that
 * much, never for ever.
 */
export class ForgeSlots {
  readonly #perPool: number;
  readonly #wake: (vmKey: string) => void;
  readonly #minting = new Map<string, number>();
  readonly #waiting = new Map<string, string[]>();

  constructor(perPool: number, wake: (vmKey: string) => void) {
    this.#perPool = Math.max(1, perPool);
    this.#wake = wake;
  }

  /** A slot of `pool` for `vmKey` now, or false (it is queued to be woken). */
  take(pool: string, vmKey: string): boolean {
    const waiting = this.#waiting.get(pool) ?? [];
    const busy = this.#minting.get(pool) ?? 0;
    if (busy >= this.#perPool) {
      if (!waiting.includes(vmKey)) waiting.push(vmKey);
      this.#waiting.set(pool, waiting);
      return false;
    }
    this.#minting.set(pool, busy + 1);
    const at = waiting.indexOf(vmKey);
    if (at >= 0) waiting.splice(at, 1);
    if (waiting.length === 0) this.#waiting.delete(pool);
    return true;
  }

  /** Gives back a slot of `pool` and wakes the VM that has waited longest for one. */
  release(pool: string): void {
    const busy = (this.#minting.get(pool) ?? 1) - 1;
    if (busy <= 0) this.#minting.delete(pool);
    else this.#minting.set(pool, busy);
    const waiting = this.#waiting.get(pool);
    const next = waiting?.shift();
    if (waiting !== undefined && waiting.length === 0) this.#waiting.delete(pool);
    if (next !== undefined) this.#wake(next);
  }

  /** Setups minting now, over all pools (tests, metrics). */
  get minting(): number {
    let n = 0;
    for (const busy of this.#minting.values()) n += busy;
    return n;
  }
}
