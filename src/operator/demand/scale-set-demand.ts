/**
 * A scale-set pool's demand (spec.github.scaleSet), from its listener (src/operator/scale-sets):
 * the jobs GitHub assigned to the scale set that no runner runs yet, as the latest statistics say;
 * its busy and finished runners from JobStarted and JobCompleted. The listener owns its own long
 * poll; this only reads what it last said.
 */
import type { JobMessage } from "../../forge/index.ts";
import type { Informer } from "../../kube/index.ts";
import type { ImpVMRunnerPool } from "../../api/index.ts";
import { keyOf } from "../../kube/index.ts";
import type { DemandSource, StoredPool } from "./demand-source.ts";
import type { RunnerActivity } from "./runner-activity.ts";
import { isPoolRunner } from "./runner-names.ts";

/** A scale-set pool's listener, as the pools read it (ScaleSetListeners.view). */
export interface ScaleSetPoolView {
  readonly reason: string;
  readonly message: string;
  readonly scaleSetId: number | undefined;
  readonly sessionId: string | undefined;
  readonly statistics: { readonly totalAssignedJobs: number; readonly totalRunningJobs: number; readonly totalAvailableJobs: number } | undefined;
  /** The capacity the listener's last poll told the service; undefined before its first poll. */
  readonly capacity: number | undefined;
}

/**
 * Jobs a scale-set pool leaves on GitHub for want of node capacity: of those GitHub holds for it,
 * the ones beyond what the capacity it said still has room for (assigned + available − capacity),
 * while it said less than maxConcurrent (the cluster has no room for more of its VMs). Jobs within
 * the capacity only wait to be offered; at maxConcurrent, waiting jobs wait for the pool's own cap
 * (reason MaxConcurrent), not for nodes.
 */
export function jobsWaitingForCapacity(view: ScaleSetPoolView | undefined, maxConcurrent: number): number {
  if (view?.capacity === undefined || view.statistics === undefined || view.capacity >= maxConcurrent) return 0;
  const { totalAvailableJobs: available, totalAssignedJobs: assigned } = view.statistics;
  return Math.min(available, Math.max(0, assigned + available - view.capacity));
}

export interface ScaleSetViews {
  view(poolKey: string): ScaleSetPoolView | undefined;
}

export class ScaleSetDemand implements DemandSource {
  readonly #poolCache: Pick<Informer<ImpVMRunnerPool>, "get">;
  readonly #views: ScaleSetViews | undefined;
  readonly #ledger: RunnerActivity;
  readonly #enqueue: (poolKey: string) => void;

  constructor(options: { poolCache: Pick<Informer<ImpVMRunnerPool>, "get">; views: ScaleSetViews | undefined; ledger: RunnerActivity; enqueue: (poolKey: string) => void }) {
    this.#poolCache = options.poolCache;
    this.#views = options.views;
    this.#ledger = options.ledger;
    this.#enqueue = options.enqueue;
  }

  async observe(): Promise<void> {}

  waiting(pool: StoredPool): number {
    const stats = this.#views?.view(keyOf(pool))?.statistics;
    return stats === undefined ? 0 : Math.max(0, stats.totalAssignedJobs - stats.totalRunningJobs);
  }

  nextLookInMs(): number {
    return Infinity;
  }

  forget(): void {}

  /**
   * A JobStarted or JobCompleted from the pool's listener: its runner (= the VM's name) is busy, or
   * finished. Idempotent (a message may come again after a crash); a runner name that is not one
   * of the pool's VMs changes nothing.
   */
  onJob(poolKey: string, job: JobMessage): void {
    if (job.messageType !== "JobStarted" && job.messageType !== "JobCompleted") return;
    const pool = this.#poolCache.get(poolKey);
    if (pool === undefined || job.runnerName === "" || !isPoolRunner(pool.metadata.name, job.runnerName)) return;
    if (job.messageType === "JobStarted") this.#ledger.runnerBusy(job.runnerName, true);
    else this.#ledger.runnerFinished(job.runnerName);
    this.#enqueue(poolKey);
  }
}
