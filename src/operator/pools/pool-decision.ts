/**
 * The pool arithmetic, as a pure function of what was observed and the time: how many VMs to
 * create, which idle ones to scale down, which terminal ones to remove, what the status says, and
 * how the failure budget moves. No I/O here; the controller observes, calls `decidePool`, then acts.
 *
 *   desired  = min(maxConcurrent, busy + minIdle + queued jobs)
 *   have     = idle + busy + starting + creations not yet in the cache
 *   create   = min(scaleUpStep, desired − have, maxConcurrent − every non-terminal VM − creations)
 *   scale down at most have − desired VMs: unbound ones (no runner yet), then idle runners
 *   drain: idle runners on a cordoned node are scaled down whatever the count, and do not count
 *          in `have`, so their replacements are created (and placed elsewhere)
 *
 * A runner whose job completed is finished: a JIT runner takes one job, then exits and its VM
 * ends on its own. It is neither idle (it takes no job) nor scaled down (deleting it would race its
 * own clean exit and record the VM Failed/Deleted), and its replacement is wanted at once.
 *
 * Terminal VMs hold no capacity (they are removed and replaced); VMs being deleted still count
 * against maxConcurrent until they are gone, because their VMM may still run.
 */
import type { FailureBudgetStatus, VMPhase } from "../../api/index.ts";

export interface FailureBudgetPolicy {
  /** Start failures in a row after which the pool is marked as failing (ARC gives up after 5). */
  readonly maxFailures: number;
  /** Wait after the first failure; doubles with each further one. */
  readonly baseMs: number;
  /** Longest wait between creations while failing (ARC: 80 s). */
  readonly capMs: number;
}

export const DEFAULT_FAILURE_BUDGET: FailureBudgetPolicy = { maxFailures: 5, baseMs: 5_000, capMs: 80_000 };

/** One VM of the pool as the decision needs it. */
export interface PoolVmView {
  readonly name: string;
  readonly uid: string;
  readonly phase: VMPhase | undefined;
  readonly deleting: boolean;
  /** GitHub says (or a webhook said) its runner runs a job. */
  readonly busy: boolean;
  /** Its runner completed its one job (a completed webhook): the VM is about to end by itself. */
  readonly finished?: boolean;
  /** status.nodeName is set: the VM may be getting its setup or booting. */
  readonly bound: boolean;
  /** Its node is cordoned (ImpNode spec.unschedulable, or `kubectl cordon`/`drain` of its Node). */
  readonly draining?: boolean;
  readonly createdAt: number;
  /** When the workload started (phaseTimestamps.running), if it did. */
  readonly runningAt: number | undefined;
  /** When it failed (phaseTimestamps.failed), if it did. */
  readonly failedAt: number | undefined;
  /** Waiting to be placed, and the scheduler found no node with room for it (its Scheduled condition: Unschedulable). */
  readonly unschedulable?: boolean;
}

/**
 * Start failures counted so far; kept by the controller between reconciles, and while failing also
 * in the pool's status (`failureBudgetStatus`), from which a restarted operator or a new leader
 * takes it up again (`restoreFailures`).
 */
export interface FailureState {
  readonly consecutive: number;
  readonly lastFailureAt: number | undefined;
  /** VM uids already counted (as a failure or a success), so none counts twice. */
  readonly counted: ReadonlySet<string>;
  /** Pool generation the count belongs to: a spec change starts a fresh budget. */
  readonly generation: number | undefined;
  /** Time of the latest VM event counted. */
  readonly countedThrough: number | undefined;
  /**
   * Restored from status, where the uids were not kept: events at or before this time count as
   * counted already. Errs towards counting too few (a VM event in the same millisecond as the last
   * one counted before the restart), never counting one twice.
   */
  readonly restoredThrough: number | undefined;
}

export const NO_FAILURES: FailureState = { consecutive: 0, lastFailureAt: undefined, counted: new Set(), generation: undefined, countedThrough: undefined, restoredThrough: undefined };

const iso = (ms: number): string => new Date(ms).toISOString();

/** What the pool's status keeps of the budget: nothing once the last VM started (a fresh budget needs no record). */
export function failureBudgetStatus(state: FailureState, policy: FailureBudgetPolicy): FailureBudgetStatus | undefined {
  if (state.consecutive <= 0 || state.lastFailureAt === undefined) return undefined;
  return {
    consecutiveFailures: state.consecutive,
    lastFailureTime: iso(state.lastFailureAt),
    backoffUntil: iso(state.lastFailureAt + failureBackoffMs(policy, state.consecutive)),
    countedThrough: iso(state.countedThrough ?? state.lastFailureAt),
    generation: state.generation ?? 0,
  };
}

/** The budget a pool's status recorded, if it belongs to the pool's current generation and reads well. */
export function restoreFailures(status: Readonly<FailureBudgetStatus> | undefined, generation: number | undefined): FailureState {
  if (status === undefined || status.generation !== (generation ?? 0)) return { ...NO_FAILURES, generation };
  const lastFailureAt = Date.parse(status.lastFailureTime);
  const countedThrough = Date.parse(status.countedThrough);
  if (!Number.isFinite(lastFailureAt) || !Number.isFinite(countedThrough) || !(status.consecutiveFailures > 0)) return { ...NO_FAILURES, generation };
  return { consecutive: status.consecutiveFailures, lastFailureAt, counted: new Set(), generation, countedThrough, restoredThrough: countedThrough };
}

export interface PoolObservation {
  readonly minIdle: number;
  readonly maxConcurrent: number;
  readonly scaleUpStep: number;
  readonly generation: number | undefined;
  readonly vms: readonly PoolVmView[];
  /** Names created but not yet seen by the cache. */
  readonly creating: readonly string[];
  /** Names deleted but still in the cache without a deletionTimestamp. */
  readonly deletingExpected: readonly string[];
  readonly queuedJobs: number;
  readonly failures: FailureState;
  readonly policy: FailureBudgetPolicy;
  readonly now: number;
}

export interface PoolCounts {
  readonly desired: number;
  readonly current: number;
  readonly idle: number;
  readonly busy: number;
  readonly starting: number;
  readonly failed: number;
}

export interface PoolDecision {
  readonly create: number;
  /** VMs to deregister and delete: idle runners on cordoned nodes, then unbound ones (nothing runs there yet), then idle runners, oldest first. */
  readonly scaleDown: readonly string[];
  /** Terminal VMs to delete (their registration is removed by the cleanup finalizer). */
  readonly removeTerminal: readonly string[];
  readonly counts: PoolCounts;
  readonly failures: FailureState;
  /** Creation is held back by the failure budget until then. */
  readonly holdUntil: number | undefined;
  readonly budgetExhausted: boolean;
  /** busy + minIdle + queued is above maxConcurrent. */
  readonly cappedByMaxConcurrent: boolean;
  /** The pool's VMs that wait for node capacity: demand the cluster cannot place now. */
  readonly waitingForCapacity: number;
}

const isTerminal = (phase: VMPhase | undefined): boolean => phase === "Succeeded" || phase === "Failed";

/** Wait before the next creation after `consecutive` start failures. */
export function failureBackoffMs(policy: FailureBudgetPolicy, consecutive: number): number {
  if (consecutive <= 0) return 0;
  return Math.min(policy.capMs, policy.baseMs * 2 ** Math.min(consecutive - 1, 30));
}

/**
 * Moves the failure budget: a VM that failed without its workload ever starting is a start
 * failure; a VM whose workload started proves the pool can start VMs and resets the count. Events
 * are taken in time order, so a success after failures resets and a failure after a success counts.
 */
export function updateFailures(state: FailureState, vms: readonly PoolVmView[], generation: number | undefined, now: number): FailureState {
  const base = state.generation === generation ? state : { ...NO_FAILURES, generation };
  const present = new Set(vms.map((v) => v.uid));
  const counted = new Set([...base.counted].filter((uid) => present.has(uid)));
  const events: Array<{ readonly at: number; readonly failed: boolean; readonly uid: string }> = [];
  for (const vm of vms) {
    if (counted.has(vm.uid)) continue;
    const event =
      vm.runningAt !== undefined ? { at: vm.runningAt, failed: false, uid: vm.uid } : vm.phase === "Failed" ? { at: vm.failedAt ?? now, failed: true, uid: vm.uid } : undefined;
    if (event === undefined) continue;
    if (base.restoredThrough !== undefined && event.at <= base.restoredThrough) {
      counted.add(vm.uid); // counted before the restart
      continue;
    }
    events.push(event);
  }
  events.sort((a, b) => a.at - b.at);
  let consecutive = base.consecutive;
  let lastFailureAt = base.lastFailureAt;
  let countedThrough = base.countedThrough;
  for (const e of events) {
    counted.add(e.uid);
    countedThrough = Math.max(countedThrough ?? e.at, e.at);
    if (e.failed) {
      consecutive++;
      lastFailureAt = Math.max(lastFailureAt ?? e.at, e.at);
    } else {
      consecutive = 0;
      lastFailureAt = undefined;
    }
  }
  return { consecutive, lastFailureAt, counted, generation, countedThrough, restoredThrough: base.restoredThrough };
}

export function decidePool(o: PoolObservation): PoolDecision {
  const failures = updateFailures(o.failures, o.vms, o.generation, o.now);
  const expectedGone = new Set(o.deletingExpected);
  let idle: PoolVmView[] = [];
  let unbound: PoolVmView[] = [];
  const drained: string[] = [];
  let busy = 0;
  let starting = 0;
  let failed = 0;
  let nonTerminal = 0;
  const removeTerminal: string[] = [];
  for (const vm of o.vms) {
    if (isTerminal(vm.phase)) {
      if (vm.phase === "Failed") failed++;
      if (!vm.deleting) removeTerminal.push(vm.name);
      continue;
    }
    nonTerminal++;
    if (vm.deleting || expectedGone.has(vm.name) || vm.finished === true) continue;
    if (vm.busy) busy++;
    else if (vm.phase === "Running" && vm.draining === true) drained.push(vm.name);
    else if (vm.phase === "Running") idle.push(vm);
    else {
      starting++;
      if (!vm.bound) unbound.push(vm);
    }
  }
  idle = idle.sort((a, b) => a.createdAt - b.createdAt || a.name.localeCompare(b.name));
  unbound = unbound.sort((a, b) => b.createdAt - a.createdAt || a.name.localeCompare(b.name));
  const creating = o.creating.length;
  const wanted = busy + o.minIdle + o.queuedJobs;
  const desired = Math.min(o.maxConcurrent, wanted);
  const have = idle.length + busy + starting + creating;
  const room = Math.max(0, o.maxConcurrent - nonTerminal - creating);

  const backoff = failureBackoffMs(o.policy, failures.consecutive);
  const holdUntil = failures.lastFailureAt === undefined || backoff === 0 ? undefined : failures.lastFailureAt + backoff;
  const holding = holdUntil !== undefined && o.now < holdUntil;
  // While the pool is failing, one VM at a time probes whether the cause is gone.
  const step = failures.consecutive > 0 ? 1 : o.scaleUpStep;
  const create = holding ? 0 : Math.max(0, Math.min(step, desired - have, room));
  const excess = have - desired;
  // Never a busy runner, never a bound VM still starting (its runner may be about to take a job).
  // A busy runner on a cordoned node finishes its job; its VM then ends by itself.
  const scaleDown = [...drained, ...(excess > 0 ? [...unbound, ...idle].slice(0, excess).map((v) => v.name) : [])];

  return {
    create,
    scaleDown,
    removeTerminal,
    counts: { desired, current: nonTerminal, idle: idle.length, busy, starting: starting + creating, failed },
    failures,
    holdUntil: holding ? holdUntil : undefined,
    budgetExhausted: failures.consecutive >= o.policy.maxFailures,
    cappedByMaxConcurrent: wanted > o.maxConcurrent,
    waitingForCapacity: o.vms.filter((v) => v.unschedulable === true && !v.deleting && !v.bound && !isTerminal(v.phase)).length,
  };
}
