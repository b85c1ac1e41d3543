/**
 * The pool's runner registrations on its forge, listed at most once per interval: the list confirms
 * which runners are busy (the ledger of the pool's forge) and finds registrations named like the
 * pool's VMs that have no VM — left by a crash before the VM was recorded, or by a VM deleted behind
 * the operator's back. Those can take no job of the pool's and are removed. The last result is the
 * pool's forge condition.
 */
import { keyOf, type ReconcileContext } from "../../kube/index.ts";
import { describeError, type Clock } from "../../shared/index.ts";
import { forgeName, type PoolForges } from "../forges/index.ts";
import { poolRunnerPattern, type RunnerActivity } from "../demand/index.ts";
import type { ImpVM, ImpVMRunnerPool } from "../../api/index.ts";
import type { Stored } from "../../kube/index.ts";

export const DEFAULT_RUNNER_LIST_INTERVAL_MS = 30_000;

/** The pool's last runner list: when, whether it worked, what to say in the forge condition. */
export interface ForgeView {
  readonly at: number;
  readonly ok: boolean;
  readonly message: string;
}

export class RunnerRegistrations {
  readonly #forges: Pick<PoolForges, "forPool">;
  readonly #clock: Clock;
  readonly #intervalMs: number;
  readonly #views = new Map<string, ForgeView>();

  constructor(forges: Pick<PoolForges, "forPool">, clock: Clock, intervalMs = DEFAULT_RUNNER_LIST_INTERVAL_MS) {
    this.#forges = forges;
    this.#clock = clock;
    this.#intervalMs = intervalMs;
  }

  view(poolKey: string): ForgeView | undefined {
    return this.#views.get(poolKey);
  }

  /** Until the next list is due (0 before the first). */
  nextListInMs(poolKey: string, now: number): number {
    const view = this.#views.get(poolKey);
    return view === undefined ? 0 : Math.max(1_000, view.at + this.#intervalMs - now);
  }

  forget(poolKey: string): void {
    this.#views.delete(poolKey);
  }

  async refresh(ctx: ReconcileContext, pool: Readonly<Stored<ImpVMRunnerPool>>, vms: readonly Readonly<Stored<ImpVM>>[], creating: readonly string[], ledger: RunnerActivity): Promise<void> {
    const key = keyOf(pool);
    const last = this.#views.get(key);
    const startedAt = this.#clock.now();
    if (last !== undefined && startedAt - last.at < this.#intervalMs) return;
    const prefix = `${pool.metadata.name}-`;
    const ours = poolRunnerPattern(pool.metadata.name);
    try {
      const forge = await this.#forges.forPool(pool, ctx.signal);
      const runners = (await forge.listRunners(prefix, ctx.signal)).filter((r) => ours.test(r.name));
      ledger.runnersListed(runners, startedAt);
      const known = new Set([...vms.map((vm) => vm.metadata.name), ...creating]);
      ledger.forgetRunnersExcept(known, prefix);
      for (const orphan of runners.filter((r) => !known.has(r.name) && !r.busy)) {
        const result = await forge.removeRunner(orphan.name, orphan.id, ctx.signal);
        ctx.logger.info({ runner: orphan.name, id: orphan.id, result }, "removed a runner registration without a VM");
      }
      this.#views.set(key, { at: startedAt, ok: true, message: `Listed ${runners.length} runners of this pool on ${forgeName(pool)}` });
    } catch (err) {
      this.#views.set(key, { at: startedAt, ok: false, message: describeError(err).slice(0, 1000) });
      ctx.logger.warn({ err: describeError(err), forge: forgeName(pool) }, "cannot list the pool's runners on its forge");
    }
  }
}
