/**
 * Binding an ImpVM to a node without ever overcommitting the node, even with two operator
 * replicas racing (a leader handover where the old leader's last reconciles overlap the new one's
 * first) and stale caches.
 *
 * Protocol: (1) reserve: add the VM's uid and request to the node's reservation record (an ImpNode
 * annotation) by a merge patch that carries the ImpNode's resourceVersion, after re-checking the fit
 * against that very version's record; (2) bind: write the VM's status {phase Scheduled, nodeName}
 * guarded by the VM's resourceVersion; (3) label the VM with imp.dev/node.
 *
 * Why no node is overcommitted:
 * - Every reservation is added by a compare-and-swap on the ImpNode whose check saw every
 *   reservation before it: two writers that read the same version cannot both succeed (the second
 *   gets 409, re-reads, re-checks). So a record never holds more than the node's capacity.
 * - A VM gets status.nodeName = N only in step 2, which runs only after the VM's reservation is in
 *   N's record. A reservation leaves the record (prune) only when its VM can provably never be bound
 *   to N again: it is terminal (the API refuses to leave Succeeded/Failed), bound to another node
 *   (the API refuses to change nodeName once set), being deleted while unbound (a bind must
 *   compare-and-swap on a version without deletionTimestamp, and that is never cleared), or gone
 *   (a GET answers 404 or a different uid; uids are never reused). A reservation whose VM is still
 *   pending is never released: any replica that finds it binds the VM to that node (roll forward),
 *   so a replica dying between steps 1 and 2 leaks nothing.
 * - Hence every non-terminal VM bound to N is in N's record, and usage counted as record plus any
 *   bound VM the record lacks (VMs bound by other means) is never below the truth.
 * A VM reserved on two nodes (two replicas with different stale caches) is bound to whichever write
 * lands first; the other reservation is pruned as "bound elsewhere". Until then it holds capacity
 * twice, which errs on the safe side.
 * The price of never releasing a pending VM's reservation: a VM reserved on a node that is cordoned
 * or loses its agent before the bind lands is still bound there (and, on a lost node, then failed
 * as NodeLost) rather than placed elsewhere.
 */
import { CONDITION_TYPES, LABELS, type Condition, type ImpNode, type ImpVM } from "../../api/index.ts";
import { isNotFound, mutateWithRetry, type ResourceClient, type Cached, type Stored } from "../../kube/index.ts";
import { isTerminalVM } from "./indexes.ts";
import { nodeUsage, shortfall, type BoundVm } from "./decide-placement.ts";
import { parseReservations, RESERVATIONS_ANNOTATION, serializeReservations, withoutReservations, withReservation } from "./reservations.ts";
import type { VmRequest } from "./vm-request.ts";

/** What is known about the VM behind a reservation on `nodeName`. */
export type ReservedVmFate =
  | "pending" // waiting, unbound: keep (someone will roll it forward)
  | "boundHere" // bound to this node and not ended: keep
  | "boundElsewhere"
  | "terminal"
  | "deletingUnbound"
  | "gone"
  | "unknown"; // not in the cache: ask the API before deciding

export function fateOf(vm: Cached<ImpVM> | undefined, uid: string, nodeName: string): ReservedVmFate {
  if (vm === undefined || vm.metadata.uid !== uid) return "unknown";
  if (isTerminalVM(vm)) return "terminal";
  const boundTo = vm.status?.nodeName;
  if (boundTo !== undefined) return boundTo === nodeName ? "boundHere" : "boundElsewhere";
  if (vm.metadata.deletionTimestamp !== undefined) return "deletingUnbound";
  return "pending";
}

/** Fates that prove the VM will never be bound to the node: its reservation may go. */
export const RELEASABLE: ReadonlySet<ReservedVmFate> = new Set(["boundElsewhere", "terminal", "deletingUnbound", "gone"]);

export type ReserveOutcome = "reserved" | "alreadyReserved" | "noFit" | "unreadable";

/**
 * Step 1. `bound` is the cache's list of VMs bound to the node (VMs the record lacks still count).
 * Returns what happened on the freshest version of the ImpNode.
 */
export async function reserve(
  nodes: Pick<ResourceClient<ImpNode>, "get" | "patch" | "patchStatus">,
  args: { readonly nodeName: string; readonly vm: Cached<ImpVM>; readonly request: VmRequest; readonly bound: readonly BoundVm[]; readonly signal?: AbortSignal; readonly cachedNode?: Cached<ImpNode> | undefined },
): Promise<{ readonly outcome: ReserveOutcome; readonly detail: string }> {
  const uid = args.vm.metadata.uid;
  let outcome: ReserveOutcome = "noFit";
  let detail = "";
  await mutateWithRetry(nodes, {
    ref: { name: args.nodeName },
    // The cache's copy first (no GET): a record another bind changed since makes it a 409 and a fresh read.
    from: args.cachedNode,
    ...(args.signal === undefined ? {} : { signal: args.signal }),
    mutate: (draft) => {
      const parsed = parseReservations(draft);
      if (!parsed.ok) {
        outcome = "unreadable";
        detail = parsed.message;
        return false;
      }
      if (Object.hasOwn(parsed.record, uid)) {
        outcome = "alreadyReserved";
        return false;
      }
      if (draft.spec?.unschedulable === true) {
        outcome = "noFit";
        detail = "cordoned";
        return false;
      }
      const capacity = draft.status?.capacity;
      const short = capacity === undefined ? ["capacity"] : shortfall(args.request, capacity, nodeUsage(parsed.record, args.bound));
      if (short.length > 0) {
        outcome = "noFit";
        detail = `not enough ${short.join(", ")}`;
        return false;
      }
      const next = withReservation(parsed.record, uid, {
        namespace: args.vm.metadata.namespace ?? "",
        name: args.vm.metadata.name,
        vcpu: args.request.vcpu,
        memoryMiB: args.request.memoryMiB,
      });
      draft.metadata.annotations = { ...draft.metadata.annotations, [RESERVATIONS_ANNOTATION]: serializeReservations(next) };
      outcome = "reserved";
      detail = "";
    },
  });
  return { outcome, detail };
}

/** Removes `uids` from the node's record (only ever with fates in RELEASABLE). */
export async function release(
  nodes: Pick<ResourceClient<ImpNode>, "get" | "patch" | "patchStatus">,
  nodeName: string,
  uids: readonly string[],
  signal?: AbortSignal,
): Promise<void> {
  if (uids.length === 0) return;
  try {
    await mutateWithRetry(nodes, {
      ref: { name: nodeName },
      ...(signal === undefined ? {} : { signal }),
      mutate: (draft) => {
        const parsed = parseReservations(draft);
        if (!parsed.ok || !uids.some((u) => Object.hasOwn(parsed.record, u))) return false;
        draft.metadata.annotations = { ...draft.metadata.annotations, [RESERVATIONS_ANNOTATION]: serializeReservations(withoutReservations(parsed.record, uids)) };
      },
    });
  } catch (err) {
    if (!isNotFound(err)) throw err; // the ImpNode is gone, and its record with it
  }
}

export type BindOutcome = "bound" | "alreadyBound" | "boundElsewhere" | "terminal" | "deleting" | "gone";
/** The outcome, and the VM as the API server last returned it (stored by the bind, or read; or the cached copy the bind skipped on), so the next write needs no GET. */
export interface BindResult {
  readonly outcome: BindOutcome;
  readonly stored?: Stored<ImpVM> | Cached<ImpVM>;
}

/** Sets or replaces the Scheduled condition, keeping lastTransitionTime when the status did not change. */
export function withScheduledCondition(conditions: readonly Condition[] | undefined, next: Omit<Condition, "lastTransitionTime">, now: string): Condition[] {
  const type = CONDITION_TYPES.vm.Scheduled;
  const old = conditions?.find((c) => c.type === type);
  const lastTransitionTime = old !== undefined && old.status === next.status ? old.lastTransitionTime : now;
  return [...(conditions ?? []).filter((c) => c.type !== type), { ...next, type, lastTransitionTime }];
}

/** Step 2: the VM's status, only if it is still the same VM, unbound, pending and not being deleted. */
export async function bindVm(
  vms: Pick<ResourceClient<ImpVM>, "get" | "patch" | "patchStatus">,
  args: { readonly vm: Cached<ImpVM>; readonly nodeName: string; readonly nowMs: number; readonly signal?: AbortSignal },
): Promise<BindResult> {
  const uid = args.vm.metadata.uid;
  const now = new Date(args.nowMs).toISOString();
  let outcome: BindOutcome = "gone";
  try {
    const stored = await mutateWithRetry(vms, {
      ref: { namespace: args.vm.metadata.namespace ?? "", name: args.vm.metadata.name },
      subresource: "status",
      // The cached VM the placement decided on: current nearly always (nothing else writes a pending VM).
      from: args.vm,
      ...(args.signal === undefined ? {} : { signal: args.signal }),
      mutate: (draft) => {
        if (draft.metadata.uid !== uid) return ((outcome = "gone"), false);
        if (isTerminalVM(draft)) return ((outcome = "terminal"), false);
        const boundTo = draft.status?.nodeName;
        if (boundTo !== undefined) return ((outcome = boundTo === args.nodeName ? "alreadyBound" : "boundElsewhere"), false);
        if (draft.metadata.deletionTimestamp !== undefined) return ((outcome = "deleting"), false);
        const phase = draft.status?.phase;
        if (phase !== undefined && phase !== "Pending") return ((outcome = "terminal"), false);
        draft.status = {
          ...draft.status,
          phase: "Scheduled",
          nodeName: args.nodeName,
          phaseTimestamps: { ...draft.status?.phaseTimestamps, scheduled: now },
          conditions: withScheduledCondition(draft.status?.conditions, { type: CONDITION_TYPES.vm.Scheduled, status: "True", reason: "Scheduled", message: `Bound to node ${args.nodeName}` }, now),
        };
        outcome = "bound";
      },
    });
    return { outcome, stored };
  } catch (err) {
    if (isNotFound(err)) return { outcome: "gone" };
    throw err;
  }
}

/**
 * Step 3: imp.dev/node on the VM's main resource, so `kubectl get -l imp.dev/node=N` works.
 * `fresh`: the VM as last stored or read (by the bind) — the write starts from it instead of a GET
 * (a stale copy costs a 409 and a read, never a lost update).
 */
export async function labelVm(
  vms: Pick<ResourceClient<ImpVM>, "get" | "patch" | "patchStatus">,
  vm: Cached<ImpVM>,
  nodeName: string,
  signal?: AbortSignal,
  fresh?: Stored<ImpVM> | Cached<ImpVM>,
): Promise<void> {
  try {
    await mutateWithRetry(vms, {
      ref: { namespace: vm.metadata.namespace ?? "", name: vm.metadata.name },
      ...(fresh === undefined ? {} : { from: fresh }),
      ...(signal === undefined ? {} : { signal }),
      mutate: (draft) => {
        if (draft.metadata.uid !== vm.metadata.uid || draft.metadata.labels?.[LABELS.node] === nodeName) return false;
        draft.metadata.labels = { ...draft.metadata.labels, [LABELS.node]: nodeName };
      },
    });
  } catch (err) {
    if (!isNotFound(err)) throw err;
  }
}

/** Step for a VM no node fits: condition Scheduled=False/Unschedulable, written only when it changes; returns whether it did. */
export async function markUnschedulable(
  vms: Pick<ResourceClient<ImpVM>, "get" | "patch" | "patchStatus">,
  args: { readonly vm: Cached<ImpVM>; readonly message: string; readonly nowMs: number; readonly signal?: AbortSignal },
): Promise<boolean> {
  const now = new Date(args.nowMs).toISOString();
  const message = args.message.slice(0, 4096);
  let changed = false;
  try {
    await mutateWithRetry(vms, {
      ref: { namespace: args.vm.metadata.namespace ?? "", name: args.vm.metadata.name },
      subresource: "status",
      ...(args.signal === undefined ? {} : { signal: args.signal }),
      mutate: (draft) => {
        changed = false; // mutate may run again after a conflict: only the attempt that writes counts
        if (draft.metadata.uid !== args.vm.metadata.uid || draft.status?.nodeName !== undefined) return false;
        const phase = draft.status?.phase;
        if (phase !== undefined && phase !== "Pending") return false;
        const old = draft.status?.conditions?.find((c) => c.type === CONDITION_TYPES.vm.Scheduled);
        if (phase === "Pending" && old?.status === "False" && old.reason === "Unschedulable" && old.message === message) return false;
        draft.status = {
          ...draft.status,
          phase: "Pending",
          phaseTimestamps: { ...draft.status?.phaseTimestamps, pending: draft.status?.phaseTimestamps?.pending ?? now },
          conditions: withScheduledCondition(draft.status?.conditions, { type: CONDITION_TYPES.vm.Scheduled, status: "False", reason: "Unschedulable", message }, now),
        };
        changed = true;
      },
    });
  } catch (err) {
    if (!isNotFound(err)) throw err;
    return false;
  }
  return changed;
}
