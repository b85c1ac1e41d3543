/**
 * How a VM ended, from what Imp itself observed or can verify: the guest channel's exit event (or
 * exec.status) while an agent watched, the step a boot failed in, the VMM's own exit as the launcher
 * or supervisor recorded it, and — after the fact — an exit record that verifies with the boot's key.
 * Never from console text.
 */
import { VM_REASONS, type VMReason } from "../../api/index.ts";
import { describeError, ImpError, describeExit } from "../../shared/index.ts";
import type { VmExit } from "../vmm/index.ts";
import type { ExecOutcome } from "../guest/index.ts";
import { isGuestMisbehaviour } from "./guest-connection.ts";
import type { VmOutcome } from "./local-vm.ts";
import type { WorkloadExitRecord } from "../guest/index.ts";
import type { BootStepName } from "./boot-steps.ts";

const MAX_MESSAGE = 4000;

export function outcomeOfExit(exit: ExecOutcome): VmOutcome {
  if (exit.state === "failed") return { succeeded: false, reason: VM_REASONS.WorkloadStartFailed, message: exit.error ?? "the workload could not start" };
  const code = exit.exitCode ?? 255;
  if (code === 0) return { succeeded: true, reason: VM_REASONS.Completed, message: "the workload exited 0", exitCode: 0 };
  return { succeeded: false, reason: VM_REASONS.ExitNonZero, message: `the workload exited ${code}${exit.signal === undefined ? "" : ` (${exit.signal})`}`, exitCode: code };
}

/** The reason a boot failed by the step it failed in. */
const REASON_BY_STEP = {
  "vm-dir": VM_REASONS.PrepareFailed,
  image: VM_REASONS.PrepareFailed,
  disks: VM_REASONS.PrepareFailed,
  cache: VM_REASONS.PrepareFailed,
  network: VM_REASONS.PrepareFailed,
  // A job VM's snapshot step falls back to a boot; these stand only where a failure reaches a VM.
  snapshot: VM_REASONS.PrepareFailed,
  save: VM_REASONS.PrepareFailed,
  "warm-up": VM_REASONS.PrepareFailed,
  vmm: VM_REASONS.VmmExited,
  adopt: VM_REASONS.VmmExited,
  guest: VM_REASONS.BootTimeout,
  configure: VM_REASONS.GuestUnreachable,
  setup: VM_REASONS.SetupFailed,
  exec: VM_REASONS.GuestUnreachable,
  follow: VM_REASONS.GuestUnreachable,
} as const satisfies Record<BootStepName, VMReason>;

/** Error codes more precise than the step they were raised in. */
const REASON_BY_CODE: Readonly<Record<string, VMReason>> = {
  BootTimeout: VM_REASONS.BootTimeout,
  GuestUnreachable: VM_REASONS.GuestUnreachable,
  ExecNotReceived: VM_REASONS.GuestUnreachable,
  SetupOpenFailed: VM_REASONS.SetupFailed,
  SetupSealedToOtherKey: VM_REASONS.SetupFailed,
  SetupSealedInvalid: VM_REASONS.SetupFailed,
  WorkloadStartFailed: VM_REASONS.WorkloadStartFailed,
};

/** The reason a boot failed, by the step it failed in (undefined: before any); the error's own code where it is more precise. */
export function outcomeOfBootFailure(step: BootStepName | undefined, err: unknown): VmOutcome {
  const message = `${step ?? ""}: ${describeError(err)}`.slice(0, MAX_MESSAGE);
  if (isGuestMisbehaviour(err)) return { succeeded: false, reason: VM_REASONS.GuestMisbehaved, message };
  const code = err instanceof ImpError ? err.code : "Unknown";
  const byStep = step === undefined ? undefined : REASON_BY_STEP[step];
  return { succeeded: false, reason: REASON_BY_CODE[code] ?? byStep ?? VM_REASONS.PrepareFailed, message };
}

const MIB = 1024 * 1024;

/**
 * The VM's end when its memory cgroup's OOM killer ended the VMM (the supervisor read it from the
 * cgroup as the VMM exited); undefined for any other exit. The message says what a user can change.
 */
export function oomKilledOutcome(exit: VmExit | undefined): VmOutcome | undefined {
  const memory = exit?.memory;
  if (exit === undefined || memory?.oomKilled !== true) return undefined;
  const mib = (bytes: number | undefined): string => (bytes === undefined ? "unknown" : `${Math.round(bytes / MIB)} MiB`);
  return {
    succeeded: false,
    reason: VM_REASONS.OOMKilled,
    message: `the VM's memory limit was reached and the kernel's OOM killer ended its VMM (${describeExit(exit)}): limit ${mib(memory.limitBytes)} (the class's memory plus the VMM's own overhead), peak ${mib(memory.peakBytes)}; give the VM class more memory or the job less to hold`,
  };
}

/**
 * The VM's end when its supervisor killed the VMM because the guest's console log passed its bound
 * (the agent stops such a VM itself while it watches; the supervisor does it while no agent runs).
 */
export function consoleFloodOutcome(exit: VmExit | undefined): VmOutcome | undefined {
  const bound = exit?.fileBound;
  if (bound === undefined) return undefined;
  return {
    succeeded: false,
    reason: VM_REASONS.GuestMisbehaved,
    message: `the guest misbehaved and was stopped: it wrote ${bound.bytes} bytes to the serial console, over the ${bound.maxBytes}-byte limit (a guest flooding its console would fill the node's disk), and its supervisor killed the VMM; the last lines are in ${bound.path}`.slice(0, MAX_MESSAGE),
  };
}

/** Why a VMM died, when the kernel (OOM) or its supervisor (console bound) ended it; else undefined. */
export function vmmDeathCause(vmmExit: VmExit | undefined): VmOutcome | undefined {
  return oomKilledOutcome(vmmExit) ?? consoleFloodOutcome(vmmExit);
}

/**
 * An outcome that ended in the VMM's death, told more precisely when that death was an OOM kill or
 * a console flood; an outcome the workload itself decided (its exit code is known) stands as it is.
 */
export function explainVmmDeath(outcome: VmOutcome, vmmExit: VmExit | undefined): VmOutcome {
  if (outcome.succeeded || outcome.exitCode !== undefined) return outcome;
  return vmmDeathCause(vmmExit) ?? outcome;
}

export function misbehaved(err: unknown): VmOutcome {
  return { succeeded: false, reason: VM_REASONS.GuestMisbehaved, message: `the guest misbehaved and was stopped: ${describeError(err)}`.slice(0, MAX_MESSAGE) };
}

/**
 * The outcome of a VM whose VMM ended while no agent watched it: the exit record that verified
 * with the boot's key if there is one, else "unknown" (never a success), with the VMM's own exit as
 * the launcher or supervisor recorded it.
 */
export function outcomeAfterTheFact(record: WorkloadExitRecord | undefined, vmmExit: VmExit | undefined, why: string): VmOutcome {
  const vmm = vmmExit === undefined ? "its VMM is gone" : `its VMM ${describeExit(vmmExit)}`;
  if (record === undefined) {
    const cause = vmmDeathCause(vmmExit);
    if (cause !== undefined) return { ...cause, message: `${cause.message} (while no agent watched the VM)`.slice(0, MAX_MESSAGE) };
  }
  if (record !== undefined) {
    const seen = outcomeOfExit({ execId: record.execId, state: "exited", exitCode: record.exitCode, ...(record.signal === undefined ? {} : { signal: record.signal }) });
    return { ...seen, message: `${seen.message}, while no agent watched the VM (from its verified exit record; ${vmm})` };
  }
  return { succeeded: false, reason: VM_REASONS.OutcomeUnknown, message: `the VM ended while no agent watched it and left no exit record that verifies; ${vmm} (${why})`.slice(0, MAX_MESSAGE) };
}
