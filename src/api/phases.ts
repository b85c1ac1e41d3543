/**
 * The ImpVM phase machine, as data. The same table feeds the CEL rule on ImpVM.status, so the API
 * server refuses any status write that moves a VM backwards (a VM is never booted twice) and the
 * controllers can check a move before they write it.
 *
 * Moves go forward only, possibly skipping phases (an agent that restarts may find a VM already
 * finished): Pending → Scheduled → Preparing → Booting → Running → Succeeded. Any non-final phase may
 * go to Failed or Terminating; Terminating may only end in Succeeded or Failed. Succeeded and
 * Failed are final.
 */
import { terminalError } from "../shared/index.ts";

/** Pending → Scheduled → Preparing → Booting → Running → Succeeded | Failed, plus Terminating on delete. */
export const VM_PHASES = ["Pending", "Scheduled", "Preparing", "Booting", "Running", "Succeeded", "Failed", "Terminating"] as const;
export type VMPhase = (typeof VM_PHASES)[number];
/** Phases after which nothing about the VM changes again. */
export const TERMINAL_VM_PHASES = ["Succeeded", "Failed"] as const satisfies readonly VMPhase[];
/** Phases in which the VM holds capacity on its node, so status.nodeName must be set. */
export const BOUND_VM_PHASES = ["Scheduled", "Preparing", "Booting", "Running"] as const satisfies readonly VMPhase[];

/** For each phase, the phases it may move to (staying put is always allowed and not listed). */
export const VM_PHASE_TRANSITIONS = {
  Pending: ["Scheduled", "Preparing", "Booting", "Running", "Succeeded", "Failed", "Terminating"],
  Scheduled: ["Preparing", "Booting", "Running", "Succeeded", "Failed", "Terminating"],
  Preparing: ["Booting", "Running", "Succeeded", "Failed", "Terminating"],
  Booting: ["Running", "Succeeded", "Failed", "Terminating"],
  Running: ["Succeeded", "Failed", "Terminating"],
  Terminating: ["Succeeded", "Failed"],
  Succeeded: [],
  Failed: [],
} as const satisfies Record<VMPhase, readonly VMPhase[]>;

/** Succeeded or Failed: nothing about the VM changes again. */
export function isTerminalVMPhase(phase: VMPhase): boolean {
  return (TERMINAL_VM_PHASES as readonly VMPhase[]).includes(phase);
}

/** Whether a status write may move the VM from `from` to `to`. */
export function canTransitionVM(from: VMPhase, to: VMPhase): boolean {
  return from === to || (VM_PHASE_TRANSITIONS[from] as readonly VMPhase[]).includes(to);
}

/** Throws a terminal error naming both phases when the move is not allowed; returns `to` otherwise. */
export function transitionVM(from: VMPhase, to: VMPhase): VMPhase {
  if (!canTransitionVM(from, to)) {
    throw terminalError("IllegalPhaseTransition", `Cannot move ImpVM from phase ${from} to ${to}: allowed are ${VM_PHASE_TRANSITIONS[from].join(", ") || "none (final)"}`);
  }
  return to;
}
