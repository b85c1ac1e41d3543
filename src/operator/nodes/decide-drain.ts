/**
 * Draining a node, as a pure function of what was observed and the clock. A node is drained while
 * it is cordoned (`kubectl cordon`/`drain` of its Node, or ImpNode `spec.unschedulable`):
 *
 *  - the drain starts when the operator first sees the cordon (recorded on the ImpNode, so a new
 *    leader counts the same grace); an uncordon forgets it and the "drained" mark;
 *  - no new VM is placed there (the scheduler) and idle runners there are replaced elsewhere (the
 *    pools); a job already running keeps its VM until its pool's `drainGracePeriod` from the start
 *    of the drain, after which the VM is marked Failed/Drained (its agent stops it);
 *  - once no live VM is left, the node is marked drained.
 *
 * Nothing here is forge-specific and nothing is deleted: what ends a VM is the same status any
 * other component writes, and the pools replace it as they replace any ended VM.
 */
export interface DrainVm {
  readonly namespace: string;
  readonly name: string;
  readonly uid: string;
  /** Not terminal, not being deleted. */
  readonly live: boolean;
  /** Its pool's drainGracePeriod (a VM of no pool: the default). */
  readonly graceMs: number;
}

export interface DrainInput {
  readonly cordoned: boolean;
  /** The ImpNode's drain-started mark (ms), if set. */
  readonly startedAtMs: number | undefined;
  /** The ImpNode's drained mark (ms), if set. */
  readonly drainedAtMs: number | undefined;
  readonly vms: readonly DrainVm[];
  readonly nowMs: number;
}

export type DrainAction =
  | { readonly type: "MarkStarted"; readonly atMs: number }
  | { readonly type: "EndVm"; readonly vm: DrainVm; readonly message: string }
  | { readonly type: "MarkDrained"; readonly atMs: number }
  | { readonly type: "ClearMarks" };

export interface DrainDecision {
  readonly actions: readonly DrainAction[];
  /** Look again then: when the next VM's grace runs out. */
  readonly recheckInMs: number | undefined;
}

export const DEFAULT_DRAIN_GRACE_MS = 60 * 60 * 1000;

const minutes = (ms: number): string => (ms % 60_000 === 0 ? `${ms / 60_000} min` : `${Math.round(ms / 1000)} s`);

export function decideDrain(input: DrainInput): DrainDecision {
  if (!input.cordoned) {
    return { actions: input.startedAtMs !== undefined || input.drainedAtMs !== undefined ? [{ type: "ClearMarks" }] : [], recheckInMs: undefined };
  }
  const actions: DrainAction[] = [];
  const started = input.startedAtMs ?? input.nowMs;
  if (input.startedAtMs === undefined) actions.push({ type: "MarkStarted", atMs: started });
  const live = input.vms.filter((vm) => vm.live);
  let recheckInMs: number | undefined;
  for (const vm of live) {
    const due = started + vm.graceMs;
    if (input.nowMs >= due) actions.push({ type: "EndVm", vm, message: `its node was drained and its job ran past the pool's drain grace (${minutes(vm.graceMs)})` });
    else recheckInMs = Math.min(recheckInMs ?? Infinity, due - input.nowMs);
  }
  if (live.length === 0 && input.drainedAtMs === undefined) actions.push({ type: "MarkDrained", atMs: input.nowMs });
  return { actions, recheckInMs };
}
