/**
 * The node agent's decision for one ImpVM: a pure function of what the API says (the ImpVM), what
 * this agent knows locally (LocalVm) and the clock. The act side carries the actions out; nothing
 * here does I/O. The rows of AGENT_TABLE are the whole state machine: which situation of the API
 * object meets which local stage, and what the agent does about it.
 */
import { hasFinalizer as hasFinalizerNamed } from "../../kube/index.ts";
import { canTransitionVM, FINALIZERS, isTerminalVMPhase, parseDurationMs, VM_REASONS, type ImpVM, type ImpVMStatus, type VMPhase } from "../../api/index.ts";
import type { LocalStage, LocalVm } from "../vm/index.ts";

export type AgentAction =
  /** Put the agent's finalizer on the VM before any node resource exists. */
  | { readonly type: "AddFinalizer" }
  /** Begin preparing and booting (the boot task runs asynchronously and reports into LocalVm). */
  | { readonly type: "Start" }
  /** Open the sealed setup the operator minted and hand it to the VM awaiting it. */
  | { readonly type: "DeliverSetup" }
  /** Stop the VM (graceful, then kill) and mark the outcome with `reason`. */
  | { readonly type: "Stop"; readonly reason: string; readonly message: string }
  /** Free every node resource (disks, tap, sockets, cgroup), verify the VMM is gone, remove the sealed setup and inputs from the status. */
  | { readonly type: "Release" }
  /** Write these status fields (only moves the phase forward). */
  | { readonly type: "PatchStatus"; readonly status: ImpVMStatus }
  /** Remove the agent's finalizer: the VM may go. */
  | { readonly type: "RemoveFinalizer" }
  /** Drop the local record: nothing of the VM remains here and the API object is gone. */
  | { readonly type: "Forget" };

export interface AgentDecision {
  readonly actions: readonly AgentAction[];
  /** Look again after this long even if nothing changes (expiry, waits). */
  readonly requeueAfterMs?: number;
}

/** What the API object says, reduced to what the table distinguishes. */
export type ApiSituation =
  | "gone" // not in the API (deleted, finalizer already gone)
  | "deleting" // deletionTimestamp set
  | "terminal" // Succeeded or Failed
  | "scheduled" // bound here and not yet touched by an agent (Pending/Scheduled)
  | "active"; // Preparing, Booting, Running or Terminating: an agent took it on

export type LocalSituation = "absent" | LocalStage;

type Row = (input: DecisionInput) => AgentDecision;

export interface DecisionInput {
  readonly vm: Readonly<ImpVM> | undefined;
  readonly local: LocalVm | undefined;
  readonly nowMs: number;
  /** How long a booted VM waits for its one-time setup to be minted before it is stopped. */
  readonly setupWaitMs: number;
}

const none: AgentDecision = { actions: [] };
const act = (...actions: AgentAction[]): AgentDecision => ({ actions });

const withFinalizerRemoved = (vm: Readonly<ImpVM> | undefined, local: LocalVm | undefined): AgentDecision =>
  vm !== undefined && hasFinalizer(vm) ? act(...syncStatus(vm, local), { type: "RemoveFinalizer" }) : act(...syncStatus(vm, local));

const stop = (reason: string, message: string): AgentAction => ({ type: "Stop", reason, message });

/**
 * The state machine. Rows: the API situation; columns: the local stage. Every cell is named, so a
 * missing case is a type error rather than a silent default.
 */
export const AGENT_TABLE: Readonly<Record<ApiSituation, Readonly<Record<LocalSituation, Row>>>> = {
  gone: {
    absent: () => none,
    starting: () => act(stop(VM_REASONS.Deleted, "the ImpVM was deleted")),
    "awaiting-setup": () => act(stop(VM_REASONS.Deleted, "the ImpVM was deleted")),
    running: () => act(stop(VM_REASONS.Deleted, "the ImpVM was deleted")),
    ended: () => act({ type: "Release" }),
    stopping: () => none,
    released: () => act({ type: "Forget" }),
  },
  deleting: {
    // Nothing known locally, but files of an earlier agent run may exist: release is idempotent.
    absent: ({ vm }) => (vm !== undefined && hasFinalizer(vm) ? act({ type: "Release" }) : none),
    starting: () => act(stop(VM_REASONS.Deleted, "the ImpVM is being deleted")),
    "awaiting-setup": () => act(stop(VM_REASONS.Deleted, "the ImpVM is being deleted")),
    running: () => act(stop(VM_REASONS.Deleted, "the ImpVM is being deleted")),
    ended: ({ vm, local }) => act(...syncStatus(vm, local), { type: "Release" }),
    stopping: () => none,
    released: ({ vm, local }) => withFinalizerRemoved(vm, local),
  },
  terminal: {
    absent: ({ vm }) => (vm !== undefined && hasFinalizer(vm) ? act({ type: "Release" }) : none),
    // Someone else ended it (the operator on NodeLost, a person): the VM must stop here too.
    starting: ({ vm }) => act(stop(vm?.status?.reason ?? VM_REASONS.Deleted, "the ImpVM was marked terminal by another component")),
    "awaiting-setup": ({ vm }) => act(stop(vm?.status?.reason ?? VM_REASONS.Deleted, "the ImpVM was marked terminal by another component")),
    running: ({ vm }) => act(stop(vm?.status?.reason ?? VM_REASONS.Deleted, "the ImpVM was marked terminal by another component")),
    ended: ({ vm, local }) => act(...syncStatus(vm, local), { type: "Release" }),
    stopping: () => none,
    released: ({ vm, local }) => withFinalizerRemoved(vm, local),
  },
  scheduled: {
    absent: ({ vm }) => (vm !== undefined && !hasFinalizer(vm) ? act({ type: "AddFinalizer" }) : act({ type: "Start" })),
    starting: ({ vm, local }) => act(...syncStatus(vm, local)),
    "awaiting-setup": ({ vm, local }) => act(...syncStatus(vm, local)),
    running: ({ vm, local }) => act(...syncStatus(vm, local)),
    ended: ({ vm, local }) => act(...syncStatus(vm, local)),
    stopping: () => none,
    released: ({ vm, local }) => act(...syncStatus(vm, local)),
  },
  active: {
    // An agent took this VM on, but this agent has no record and could not re-adopt it (the VMM is
    // gone): it is never booted again, whatever it had received.
    absent: ({ vm }) =>
      vm !== undefined && vm.status?.phase === "Terminating"
        ? act({ type: "Release" })
        : act({ type: "PatchStatus", status: { phase: "Failed", reason: VM_REASONS.VmmExited, message: "the node agent restarted and found no VMM process for this VM; it is not booted again" } }, { type: "Release" }),
    starting: ({ vm, local }) => act(...syncStatus(vm, local)),
    // Booted and waiting for the one-time setup: hand it over once the operator minted it.
    "awaiting-setup": (input) => decideSetup(input),
    running: ({ vm, local }) => act(...syncStatus(vm, local)),
    ended: ({ vm, local }) => act(...syncStatus(vm, local)),
    stopping: () => none,
    released: ({ vm, local }) => act(...syncStatus(vm, local)),
  },
};

/**
 * A VM awaiting its setup: `Minted` (the Secret exists) → hand it over; `Sent`/`Delivered` already
 * (another agent run sent it) or `Failed`/`Deleted` → never; not minted yet → wait, at most
 * `setupWaitMs` from when the VM started waiting.
 */
function decideSetup({ vm, local, nowMs, setupWaitMs }: DecisionInput): AgentDecision {
  const status = syncStatus(vm, local);
  const state = vm?.status?.setup?.state;
  switch (state) {
    case "Minted":
      return act(...status, { type: "DeliverSetup" });
    case "Sent":
    case "Delivered":
      return act(...status, stop(VM_REASONS.SetupFailed, `the API says the setup was already ${state.toLowerCase()}; a one-time setup is never sent twice`));
    case "Failed":
    case "Deleted":
      return act(...status, stop(VM_REASONS.SetupFailed, `the setup's state is ${state}`));
    case "Pending":
    case undefined: {
      const deadline = (local?.at.awaitingSetup ?? nowMs) + setupWaitMs;
      if (nowMs >= deadline) return act(...status, stop(VM_REASONS.SetupFailed, `no setup was minted within ${Math.round(setupWaitMs / 1000)} s of the VM booting`));
      return { actions: status, requeueAfterMs: deadline - nowMs };
    }
  }
}

export function apiSituation(vm: Readonly<ImpVM> | undefined): ApiSituation {
  if (vm === undefined) return "gone";
  if (vm.metadata.deletionTimestamp !== undefined) return "deleting";
  const phase = vm.status?.phase ?? "Pending";
  if (isTerminalVMPhase(phase)) return "terminal";
  if (phase === "Pending" || phase === "Scheduled") return "scheduled";
  return "active";
}

/** The agent's whole decision for one VM: the table's cell, then expiry for VMs that live too long. */
export function decideVm(input: DecisionInput): AgentDecision {
  const row = AGENT_TABLE[apiSituation(input.vm)];
  const decision = row[input.local?.stage ?? "absent"](input);
  const expiry = expiryOf(input.vm);
  const live = input.local?.stage === "starting" || input.local?.stage === "awaiting-setup" || input.local?.stage === "running";
  if (expiry === undefined || !live || apiSituation(input.vm) === "deleting") return decision;
  if (input.nowMs >= expiry) return { actions: [...decision.actions, stop(VM_REASONS.Expired, "expireAfter passed")] };
  return { ...decision, requeueAfterMs: Math.min(decision.requeueAfterMs ?? Infinity, expiry - input.nowMs) };
}

/** Creation time + the template's expireAfter (inline templates only; referenced ones are resolved by the act side). */
function expiryOf(vm: Readonly<ImpVM> | undefined): number | undefined {
  const expireAfter = vm?.spec.template?.expireAfter;
  const created = vm?.metadata.creationTimestamp;
  if (expireAfter === undefined || created === undefined) return undefined;
  return Date.parse(created) + parseDurationMs(expireAfter);
}

export function hasFinalizer(vm: Readonly<ImpVM>): boolean {
  return hasFinalizerNamed(vm, FINALIZERS.vmTeardown);
}

/** The status this agent's local knowledge implies, as a patch action when it differs from the API's. */
export function syncStatus(vm: Readonly<ImpVM> | undefined, local: LocalVm | undefined): AgentAction[] {
  if (vm === undefined || local === undefined) return [];
  const want = statusFromLocal(vm.status ?? {}, local);
  return want === undefined ? [] : [{ type: "PatchStatus", status: want }];
}

const iso = (ms: number): string => new Date(ms).toISOString();

/**
 * The status fields implied by `local`, or undefined if the API already says all of it. Phases only
 * move forward: a local stage behind the API's phase changes nothing (the API is never rewound).
 */
export function statusFromLocal(current: Readonly<ImpVMStatus>, local: LocalVm): ImpVMStatus | undefined {
  const from: VMPhase = current.phase ?? "Pending";
  let phase: VMPhase = from;
  const target = phaseOfLocal(local);
  if (target !== undefined && canTransitionVM(from, target)) phase = target;
  const ts = { ...current.phaseTimestamps };
  const stamp = (key: keyof typeof ts, ms: number | undefined): void => {
    if (ts[key] === undefined && ms !== undefined) ts[key] = iso(ms);
  };
  stamp("preparing", local.at.preparing);
  stamp("booting", local.at.booting);
  stamp("running", local.at.running);
  if (phase === "Succeeded") stamp("succeeded", local.at.ended);
  if (phase === "Failed") stamp("failed", local.at.ended);
  const next: ImpVMStatus = { ...current, phase, phaseTimestamps: ts };
  if (local.vmm !== undefined && current.vmm === undefined) next.vmm = local.vmm;
  if (local.guestIP !== undefined && current.guestIP === undefined) next.guestIP = local.guestIP;
  if (local.startedFrom !== undefined && current.startedFrom === undefined) next.startedFrom = local.startedFrom;
  if (current.prepareDurationMs === undefined && local.at.preparing !== undefined && local.at.booting !== undefined) next.prepareDurationMs = Math.round(local.at.booting - local.at.preparing);
  if (current.bootDurationMs === undefined && local.at.booting !== undefined && local.at.guestReady !== undefined) next.bootDurationMs = Math.round(local.at.guestReady - local.at.booting);
  if (phase !== from && isTerminalVMPhase(phase) && local.outcome !== undefined) {
    next.reason = local.outcome.reason;
    next.message = local.outcome.message.slice(0, 4096);
    if (local.outcome.exitCode !== undefined) next.exitCode = local.outcome.exitCode;
  }
  if (current.setup !== undefined) {
    const setupState = setupStateOf(current.setup.state, local);
    if (setupState !== current.setup.state || (local.at.delivered !== undefined && current.setup.deliveredAt === undefined)) {
      const delivered = current.setup.deliveredAt === undefined ? local.at.delivered : undefined;
      next.setup = { ...current.setup, state: setupState, ...(delivered === undefined ? {} : { deliveredAt: iso(delivered) }) };
    }
  }
  if (local.stage === "released" && (current.teardown?.processGone !== local.processGone || current.teardown.resourcesReleased !== local.resourcesReleased)) {
    const released = local.processGone && local.resourcesReleased ? local.at.released : undefined;
    next.teardown = { processGone: local.processGone, resourcesReleased: local.resourcesReleased, ...(released === undefined ? {} : { completedAt: iso(released) }) };
  }
  return JSON.stringify(next) === JSON.stringify({ ...current, phaseTimestamps: current.phaseTimestamps ?? {} }) ? undefined : next;
}

function phaseOfLocal(local: LocalVm): VMPhase | undefined {
  if (local.outcome !== undefined && (local.stage === "ended" || local.stage === "released")) return local.outcome.succeeded ? "Succeeded" : "Failed";
  switch (local.stage) {
    case "starting":
      return local.step === "preparing" ? "Preparing" : "Booting";
    case "awaiting-setup":
      return "Booting";
    case "running":
      return "Running";
    default:
      return undefined;
  }
}

/** Setup states only move forward: Minted → Sent → Delivered, or Failed; Deleted is the operator's or the release's. */
function setupStateOf(current: NonNullable<ImpVMStatus["setup"]>["state"], local: LocalVm): NonNullable<ImpVMStatus["setup"]>["state"] {
  if (current === "Deleted" || current === "Failed" || current === "Delivered") return current;
  if (local.setup === "delivered") return "Delivered";
  if (local.setup === "failed") return "Failed";
  if (local.setup === "sent") return "Sent";
  return current;
}
