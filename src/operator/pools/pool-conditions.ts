/**
 * A pool's conditions as a pure function of what the reconcile knows, beside `decidePool`: the
 * forge listing's outcome, the decision (failure budget, backoff, the maxConcurrent cap) and, for
 * scale-set pools, what its listener says. The controller applies them with `setCondition`, which
 * keeps each lastTransitionTime until its status changes.
 */
import { CONDITION_TYPES } from "../../api/index.ts";
import type { ConditionInput } from "./conditions.ts";
import type { PoolDecision } from "./pool-decision.ts";

export interface PoolConditionFacts {
  /** The last listing of the pool's runners on its forge; undefined before the first. */
  readonly forge: { readonly ok: boolean; readonly message: string } | undefined;
  readonly decision: Pick<PoolDecision, "budgetExhausted" | "cappedByMaxConcurrent" | "holdUntil" | "failures"> & Partial<Pick<PoolDecision, "waitingForCapacity">>;
  /** Scale-set pools: jobs GitHub holds for the pool because the cluster has no room for more of its VMs (jobsWaitingForCapacity). */
  readonly jobsWaitingForCapacity?: number;
  /** Scale-set pools only: the listener's reason (Listening, Starting, …) and message; undefined for other pools. */
  readonly listener: { readonly reason: string; readonly message: string } | "none-yet" | undefined;
  readonly maxConcurrent: number;
  /** The longest wait between creations while failing (the failure budget's cap). */
  readonly capMs: number;
}

/** The conditions to set, and those to remove (ScaleSetListening on a pool that left scale-set mode). */
export function poolConditions(f: PoolConditionFacts): { readonly set: ConditionInput[]; readonly remove: string[] } {
  const T = CONDITION_TYPES.pool;
  const d = f.decision;
  const set: ConditionInput[] = [];
  if (f.forge !== undefined) {
    set.push({ type: T.CredentialsValid, status: f.forge.ok ? "True" : "False", reason: f.forge.ok ? "RunnersListed" : "ForgeError", message: f.forge.message });
  }
  const listener = f.listener === "none-yet" ? { reason: "Starting", message: "" } : f.listener;
  // A scale-set pool whose listener cannot listen gets no jobs: not ready, and says why.
  const deaf = listener !== undefined && listener.reason !== "Listening" && listener.reason !== "Starting";
  const forgeFailed = f.forge?.ok === false;
  set.push({
    type: T.Ready,
    status: !forgeFailed && !d.budgetExhausted && !deaf ? "True" : "False",
    reason: d.budgetExhausted ? "FailureBudgetExhausted" : forgeFailed ? "ForgeError" : deaf ? "ScaleSetNotListening" : "Reconciled",
    message: d.budgetExhausted
      ? `${d.failures.consecutive} VMs in a row failed before their runner started; creating one VM every ${Math.round(f.capMs / 1000)} s until one starts`
      : forgeFailed
        ? (f.forge?.message ?? "")
        : deaf
          ? listener.message
          : "Pool reconciled",
  });
  const held = d.holdUntil !== undefined;
  const waiting = d.waitingForCapacity ?? 0;
  const jobsWaiting = f.jobsWaitingForCapacity ?? 0;
  const short = waiting > 0 || jobsWaiting > 0;
  set.push({
    type: T.ScalingLimited,
    status: held || d.cappedByMaxConcurrent || short ? "True" : "False",
    reason: held ? "StartFailureBackoff" : d.cappedByMaxConcurrent ? "MaxConcurrent" : short ? "NodeCapacity" : "WithinLimits",
    message: held
      ? `Creation held back after ${d.failures.consecutive} start failure(s)`
      : d.cappedByMaxConcurrent
        ? `Demand is above maxConcurrent ${f.maxConcurrent}`
        : short
          ? [
              jobsWaiting > 0 ? `${jobsWaiting} job(s) wait on GitHub, not acquired: the cluster has no room for more of this pool's VMs now (status.scaleSet.capacity is what the pool told GitHub it can hold)` : "",
              waiting > 0 ? `${waiting} runner VM(s) wait for node capacity: no node has room for them now (their Scheduled condition says why)` : "",
            ].filter((x) => x !== "").join("; ")
          : "Demand is within maxConcurrent",
  });
  if (listener === undefined) return { set, remove: [T.ScaleSetListening] };
  set.push({ type: T.ScaleSetListening, status: listener.reason === "Listening" ? "True" : "False", reason: listener.reason, message: listener.message === "" ? "Waiting for the listener" : listener.message });
  return { set, remove: [] };
}
