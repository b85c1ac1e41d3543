/**
 * What this node's agent knows of one VM, independent of the API: the runtime writes it as work
 * progresses, the pure decision (`vm-decision.ts`) reads it. The plaintext setup is never part of it.
 */
export type LocalStage =
  /** Boot task in progress (see `step`). */
  | "starting"
  /** Booted and configured; the workload waits for its one-time runner setup, which the decision hands over. */
  | "awaiting-setup"
  /** The workload process runs in the guest. */
  | "running"
  /** The VM ended (workload exit, VMM exit, or a failure); `outcome` says how. Node resources may still be held. */
  | "ended"
  /** Stop requested and under way. */
  | "stopping"
  /** Every node resource freed and the VMM verified gone. */
  | "released";

export type StartStep = "preparing" | "booting" | "delivering";

/** How the setup handoff went, as the ambiguous-handoff rule needs it: `sent` is recorded before the Exec goes out. */
export type LocalSetupState = "none" | "sent" | "delivered" | "failed";

export interface VmOutcome {
  readonly succeeded: boolean;
  /** A `VM_REASONS` value (CamelCase), or the reason another component gave. */
  readonly reason: string;
  readonly message: string;
  readonly exitCode?: number;
}

export interface LocalVm {
  readonly uid: string;
  readonly stage: LocalStage;
  readonly step?: StartStep;
  readonly outcome?: VmOutcome;
  readonly setup: LocalSetupState;
  readonly vmm?: "qemu" | "firecracker";
  readonly guestIP?: string;
  /** How the VM came up, once its guest agent answered. */
  readonly startedFrom?: "Boot" | "Snapshot";
  /** Epoch ms when each stage began (absent if it never did). */
  readonly at: {
    readonly preparing?: number;
    readonly booting?: number;
    readonly guestReady?: number;
    readonly awaitingSetup?: number;
    readonly running?: number;
    readonly ended?: number;
    readonly released?: number;
    readonly delivered?: number;
  };
  readonly processGone: boolean;
  readonly resourcesReleased: boolean;
}

export function newLocalVm(uid: string): LocalVm {
  return { uid, stage: "starting", step: "preparing", setup: "none", at: {}, processGone: false, resourcesReleased: false };
}
