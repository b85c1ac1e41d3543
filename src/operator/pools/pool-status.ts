/**
 * The pool's status as a function of its old status and what the reconcile knows: counts, queued
 * jobs, conditions (pool-conditions.ts), the failure budget, and a scale-set pool's listener.
 */
import type { ImpVMRunnerPool, ImpVMRunnerPoolStatus, ScaleSetStatus } from "../../api/index.ts";
import { jsonEqual, type Stored } from "../../kube/index.ts";
import { demandKindOf, jobsWaitingForCapacity, type ScaleSetPoolView } from "../demand/index.ts";
import { setCondition } from "./conditions.ts";
import { poolConditions } from "./pool-conditions.ts";
import { failureBudgetStatus, type FailureBudgetPolicy, type PoolDecision } from "./pool-decision.ts";
import type { ForgeView } from "./runner-registrations.ts";

export interface PoolStatusFacts {
  readonly pool: Readonly<Stored<ImpVMRunnerPool>>;
  readonly decision: PoolDecision;
  readonly forge: ForgeView | undefined;
  /** Scale-set pools: the listener's latest word (undefined before it said anything). */
  readonly listener: ScaleSetPoolView | undefined;
  readonly queuedJobs: number;
  readonly policy: FailureBudgetPolicy;
  readonly now: number;
}

export function poolStatus(f: PoolStatusFacts, old: Readonly<ImpVMRunnerPoolStatus>, generation: number | undefined): ImpVMRunnerPoolStatus {
  const { pool, decision: d } = f;
  const scaleSetPool = demandKindOf(pool) === "scale-set";
  const wanted = poolConditions({
    forge: f.forge,
    decision: d,
    jobsWaitingForCapacity: scaleSetPool ? jobsWaitingForCapacity(f.listener, pool.spec.maxConcurrent) : 0,
    listener: !scaleSetPool ? undefined : f.listener === undefined ? "none-yet" : { reason: f.listener.reason, message: f.listener.message },
    maxConcurrent: pool.spec.maxConcurrent,
    capMs: f.policy.capMs,
  });
  let conditions = (old.conditions ?? []).filter((c) => !wanted.remove.includes(c.type));
  for (const c of wanted.set) conditions = setCondition(conditions, c, f.now, generation);
  const { failureBudget: _previousBudget, scaleSet: previousScaleSet, ...rest } = old;
  const budget = failureBudgetStatus(d.failures, f.policy);
  const scaleSet = scaleSetStatus(pool, f.listener, previousScaleSet);
  const scaled = d.create > 0 || d.scaleDown.length > 0;
  return {
    ...rest,
    ...(budget === undefined ? {} : { failureBudget: budget }),
    ...(scaleSet === undefined ? {} : { scaleSet }),
    queuedJobs: f.queuedJobs,
    ...(generation === undefined ? {} : { observedGeneration: generation }),
    ...d.counts,
    conditions,
    ...(scaled ? { lastScaleTime: new Date(f.now).toISOString().replace(/\.\d{3}Z$/, "Z") } : {}),
  };
}

/** status.scaleSet: the listener's latest word, else what the status said (a restarted operator keeps the recorded session until its listener opens a new one). */
function scaleSetStatus(pool: Readonly<Stored<ImpVMRunnerPool>>, view: ScaleSetPoolView | undefined, previous: ScaleSetStatus | undefined): ScaleSetStatus | undefined {
  const name = pool.spec.github?.scaleSet?.name;
  if (name === undefined) return undefined;
  const kept = previous?.name === name ? previous : undefined;
  const id = view?.scaleSetId ?? kept?.id;
  if (id === undefined) return undefined;
  const sessionId = view === undefined ? kept?.sessionId : view.sessionId;
  const stats = view?.statistics;
  return {
    id,
    name,
    ...(sessionId === undefined ? {} : { sessionId }),
    ...(stats === undefined ? (kept?.assignedJobs === undefined ? {} : { assignedJobs: kept.assignedJobs, runningJobs: kept.runningJobs ?? 0 }) : { assignedJobs: stats.totalAssignedJobs, runningJobs: stats.totalRunningJobs }),
    ...(stats === undefined ? (kept?.availableJobs === undefined ? {} : { availableJobs: kept.availableJobs }) : { availableJobs: stats.totalAvailableJobs }),
    ...(view?.capacity === undefined ? (kept?.capacity === undefined ? {} : { capacity: kept.capacity }) : { capacity: view.capacity }),
  };
}

/**
 * The fields that only count (how many VMs are where, the jobs waiting, when it last scaled): in a
 * burst they change on every reconcile, and writing each change cost a pool-status write per VM
 * (bench:operator: 1.9 per lifecycle with 8 pool workers). Nothing decides from them — the pool
 * reads its VMs from the cache — so they are written at most once per `COUNTS_WRITE_INTERVAL_MS`
 * per pool; anything else (a condition, the failure budget, the scale set, observedGeneration) at once,
 * and the counts with it. Some of those change with the counts — a condition's message that names
 * them (`ScalingLimited`, `CredentialsValid`'s "Listed N runners"), a scale-set pool's statistics — and
 * are written at once: the bound saves writes for pools whose conditions hold still (bench:operator's
 * GitHub JIT pools), not for a scale-set pool or one short of node capacity.
 */
const COUNT_FIELDS = ["desired", "current", "idle", "busy", "starting", "failed", "queuedJobs", "lastScaleTime"] as const;
export const COUNTS_WRITE_INTERVAL_MS = 5_000;

export type StatusWrite = { readonly kind: "none" } | { readonly kind: "now" } | { readonly kind: "later"; readonly inMs: number };

/** Pure: whether the status the reconcile computed is written now, later (only counts changed, and they were written lately), or not at all. */
export function decideStatusWrite(
  old: Readonly<ImpVMRunnerPoolStatus>,
  next: Readonly<ImpVMRunnerPoolStatus>,
  lastWriteAt: number | undefined,
  now: number,
  intervalMs = COUNTS_WRITE_INTERVAL_MS,
): StatusWrite {
  if (jsonEqual(next, old)) return { kind: "none" };
  // A write "in the future" means the clock stepped back: write now rather than wait for it.
  if (lastWriteAt === undefined || lastWriteAt > now || !jsonEqual(withoutCounts(next), withoutCounts(old))) return { kind: "now" };
  const due = lastWriteAt + intervalMs;
  return now >= due ? { kind: "now" } : { kind: "later", inMs: due - now };
}

function withoutCounts(status: Readonly<ImpVMRunnerPoolStatus>): Record<string, unknown> {
  const rest: Record<string, unknown> = { ...status };
  for (const field of COUNT_FIELDS) delete rest[field];
  return rest;
}
