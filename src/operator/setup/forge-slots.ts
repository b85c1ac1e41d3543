/**
 * At most `perKey` forge writes (a runner's mint, a registration's removal) at once per paced
 * credential — GitHub paces each App installation's writes a second apart (plugin-throttling,
 * docs/github.md) — and the rest wait their turn here instead of holding a setup worker. Without it
 * the VMs of one pool bound (or ended) in a burst took every worker and waited in that pacing while
 * the other pools' VMs waited for a worker (bench:operator: ~3.5 setups a second over 50
 * installations that allow 50).
 *
 * First come, first served: a freed slot is handed to the VM that has waited longest (granted, kept
 * counted), and while anyone waits nobody else takes one. A grant not claimed within `grantTtlMs`
 * (its VM no longer needed it: deleted, already set up) goes to the next waiter. The caller also
 * requeues a VM it turned away after a while, so a wake lost on the way costs that long, never for ever.
 */
export interface ForgeSlotsOptions {
  readonly perKey: number;
  /** Wakes a VM (its work-queue key) whose turn has come. */
  readonly wake: (vmKey: string) => void;
  readonly grantTtlMs?: number;
  readonly now?: () => number;
}

interface KeyState {
  /** Slots in use, grants not yet claimed included. */
  busy: number;
  /** VM keys waiting, oldest first. */
  readonly waiting: string[];
  /** VM key → when its grant lapses. */
  readonly granted: Map<string, number>;
}

export class ForgeSlots {
  readonly #o: Required<ForgeSlotsOptions>;
  readonly #keys = new Map<string, KeyState>();

  constructor(options: ForgeSlotsOptions) {
    this.#o = { grantTtlMs: 10_000, now: Date.now, ...options, perKey: Math.max(1, options.perKey) };
  }

  /** A slot of `key` for `vmKey` now, or false (it waits its turn and is woken when it comes). */
  take(key: string, vmKey: string): boolean {
    const state = this.#state(key);
    this.#lapse(state);
    if (state.granted.delete(vmKey)) return true;
    if (state.busy < this.#o.perKey && state.waiting.length === 0) {
      state.busy++;
      return true;
    }
    if (!state.waiting.includes(vmKey)) state.waiting.push(vmKey);
    return false;
  }

  /** Gives back a slot of `key`: to the VM that has waited longest, if any. */
  release(key: string): void {
    const state = this.#keys.get(key);
    if (state === undefined) return;
    state.busy = Math.max(0, state.busy - 1);
    this.#lapse(state);
    this.#grantFree(state);
    if (state.busy === 0 && state.waiting.length === 0) this.#keys.delete(key);
  }

  /** Slots in use over all keys, unclaimed grants included (tests, metrics). */
  get busy(): number {
    let n = 0;
    for (const s of this.#keys.values()) n += s.busy;
    return n;
  }

  #state(key: string): KeyState {
    let state = this.#keys.get(key);
    if (state === undefined) this.#keys.set(key, (state = { busy: 0, waiting: [], granted: new Map() }));
    return state;
  }

  /** Grants nobody claimed in time free their slot for the next waiter. */
  #lapse(state: KeyState): void {
    const now = this.#o.now();
    for (const [vmKey, until] of state.granted) {
      if (until > now) continue;
      state.granted.delete(vmKey);
      state.busy = Math.max(0, state.busy - 1);
    }
    this.#grantFree(state);
  }

  #grantFree(state: KeyState): void {
    while (state.busy < this.#o.perKey && state.waiting.length > 0) {
      const next = state.waiting.shift() ?? "";
      state.busy++;
      state.granted.set(next, this.#o.now() + this.#o.grantTtlMs);
      this.#o.wake(next);
    }
  }
}
