/**
 * Settles the cache clones this node holds after their VMs ended: observe (the held clones on disk,
 * the ImpVMs in the agent's cache) → decide (`decideHeldClone`, pure) → act (promote or delete, then
 * say so in the VM's status). The decision itself is the operator's, from what the forge says of the
 * job (docs/caches.md); the agent only carries it out, and deletes on any doubt: a VM that is gone,
 * failed, or never decided on within `holdMs`.
 */
import type { ImpVM } from "../../api/index.ts";
import type { Cached, Informer, ResourceClient } from "../../kube/index.ts";
import { describeError, ImpError, type Clock, type Logger } from "../../shared/index.ts";
import type { CacheVolumes, HeldClone } from "../cache/index.ts";

export type HeldCloneAction =
  | { readonly type: "Wait" }
  | { readonly type: "Promote"; readonly generationId: string }
  | { readonly type: "Discard"; readonly reason: string };

/** How long a clone waits for its decision after its VM ended; then it is deleted. */
export const DEFAULT_HOLD_MS = 15 * 60_000;
/** Promotions of one clone that fail (disk full, a tool's error) before it is deleted instead. */
export const MAX_PROMOTION_ATTEMPTS = 3;

/**
 * A promoted generation's id: the job's completion time first (13 digits of ms), so the newest
 * generation of a volume is the one from the job that completed last, whichever promotion ran
 * first; the VM's uid after it, so two jobs completing in one millisecond do not collide.
 */
export function generationIdOf(jobCompletedAtMs: number, uid: string): string {
  return `${String(Math.max(0, Math.trunc(jobCompletedAtMs))).padStart(13, "0")}-${uid.replace(/[^a-z0-9]/g, "").slice(0, 12)}`;
}

export function decideHeldClone(held: HeldClone, vm: Cached<ImpVM> | undefined, nowMs: number, holdMs: number, failedAttempts: number): HeldCloneAction {
  if (vm === undefined) return { type: "Discard", reason: "VmGone" };
  const promotion = vm.status?.cache?.promotion;
  if (promotion?.decision === "Discard") return { type: "Discard", reason: promotion.reason };
  if (promotion?.decision === "Promote") {
    // Beside the operator's rule: a VM that did not end well promotes nothing, whatever was decided.
    if (vm.status?.phase !== "Succeeded") return { type: "Discard", reason: "VmNotSucceeded" };
    const completed = Date.parse(promotion.jobCompletedAt ?? "");
    if (Number.isNaN(completed)) return { type: "Discard", reason: "NoCompletionTime" };
    if (failedAttempts >= MAX_PROMOTION_ATTEMPTS) return { type: "Discard", reason: "PromotionFailed" };
    return { type: "Promote", generationId: generationIdOf(completed, held.uid) };
  }
  return nowMs - held.heldAtMs > holdMs ? { type: "Discard", reason: "NoDecision" } : { type: "Wait" };
}

export interface CacheSettlerOptions {
  readonly caches: CacheVolumes;
  readonly vmCache: Informer<ImpVM>;
  readonly vms: Pick<ResourceClient<ImpVM>, "patchStatus">;
  readonly clock: Clock;
  readonly logger: Logger;
  readonly intervalMs?: number;
  readonly holdMs?: number;
  /** Told of each clone settled (metrics). */
  readonly onSettled?: (result: "promoted" | "discarded") => void;
}

const BY_UID = "imp-agent/vm-by-uid";

export class CacheSettler {
  readonly #o: CacheSettlerOptions;
  readonly #failures = new Map<string, number>();

  constructor(options: CacheSettlerOptions) {
    this.#o = options;
    options.vmCache.addIndex(BY_UID, (vm) => [vm.metadata.uid ?? ""]);
  }

  async start(signal: AbortSignal): Promise<void> {
    await this.#o.vmCache.waitForSync(signal);
    while (!signal.aborted) {
      await this.settleOnce(signal).catch((err: unknown) => this.#o.logger.warn({ error: describeError(err) }, "cannot settle held cache clones"));
      await this.#o.clock.sleep(this.#o.intervalMs ?? 2_000, signal).catch(() => undefined);
    }
  }

  /** One round over every held clone. */
  async settleOnce(signal?: AbortSignal): Promise<void> {
    for (const held of await this.#o.caches.held()) {
      if (signal?.aborted === true) return;
      const vm = this.#o.vmCache.byIndex(BY_UID, held.uid)[0];
      const action = decideHeldClone(held, vm, this.#o.clock.now(), this.#o.holdMs ?? DEFAULT_HOLD_MS, this.#failures.get(held.uid) ?? 0);
      if (action.type === "Wait") continue;
      await this.#act(held, vm, action, signal);
    }
  }

  async #act(held: HeldClone, vm: Cached<ImpVM> | undefined, action: Exclude<HeldCloneAction, { type: "Wait" }>, signal: AbortSignal | undefined): Promise<void> {
    const log = this.#o.logger.child({ vm: vm === undefined ? held.uid : `${vm.metadata.namespace ?? ""}/${vm.metadata.name}`, volume: held.ref.volume });
    try {
      if (action.type === "Promote") {
        await this.#o.caches.settle(held, action.generationId, signal === undefined ? {} : { signal });
        log.info({ generation: action.generationId }, "cache clone promoted: the volume's next VMs on this node start from it");
      } else {
        await this.#o.caches.settle(held, undefined);
        log.info({ reason: action.reason }, "cache clone discarded");
      }
      this.#failures.delete(held.uid);
      this.#o.onSettled?.(action.type === "Promote" ? "promoted" : "discarded");
    } catch (err) {
      if (signal?.aborted === true) return;
      // A refusal (the generation exists already: an earlier run promoted it) will not change.
      const attempts = err instanceof ImpError && err.errorClass === "terminal" ? MAX_PROMOTION_ATTEMPTS : (this.#failures.get(held.uid) ?? 0) + 1;
      this.#failures.set(held.uid, attempts);
      log.warn({ error: describeError(err), attempts }, "cache clone not settled");
      return;
    }
    if (vm === undefined) return;
    const status = action.type === "Promote" ? { result: "Promoted" as const, generation: action.generationId } : { result: "Discarded" as const };
    await this.#o.vms
      .patchStatus({ namespace: vm.metadata.namespace ?? "", name: vm.metadata.name }, { status: { cache: { ...vm.status?.cache, ...status } } })
      .catch((err: unknown) => log.warn({ error: describeError(err) }, "cache result not written to the VM's status (the clone is settled)"));
  }
}
