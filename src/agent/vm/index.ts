// One VM's life on a node: its directory, the typed boot pipeline (also re-adoption and `imp run`),
// the guest handoff, exit records, outcomes, and the runtime that runs one task per VM.
export { VmDir } from "./vm-dir.ts";
export { Pipeline, type PipelineResult, type PipelineRunOptions, type StepFn } from "./pipeline.ts";
export { IMP_KERNEL_ARGS, readAdoptionFacts, type AdoptionFacts, type BootDeps, type BootStepName, type Connected, type Delivered, type Launched, type Prepared, type Requested } from "./boot-steps.ts";
export { adoptPipeline, bootPipeline } from "./lifecycle.ts";
export { followToEnd, type FollowOptions } from "./follow.ts";
export { runToEnd, type RunToEndOptions } from "./run-to-end.ts";
export { connectGuest, isGuestMisbehaviour } from "./guest-connection.ts";
export { handOffExec, workloadExecId, type HandoffDeps, type HandoffResult } from "./exec-handoff.ts";
export { newLocalVm, type LocalSetupState, type LocalStage, type LocalVm, type StartStep, type VmOutcome } from "./local-vm.ts";
export { misbehaved, outcomeAfterTheFact, outcomeOfBootFailure, outcomeOfExit } from "./outcome.ts";
export { DEFAULT_RUNTIME_TIMEOUTS, DEFAULT_WORKLOAD_ENV, DEFAULT_WORKLOAD_PATH, type KernelFiles, type RuntimeTimeouts, type SetupStore, type VmBootRequest, type VmCacheRequest, type VmImageRequest, type VmImageSource, type VmLaunchPorts, type VmNetworkLease, type VmNetworkProvider, type VmRef, type VmWorkload, type WorkloadPorts } from "./ports.ts";
export { MemorySetupStore } from "./memory-setup-store.ts";
export { VmRuntime, type HeldResources, type RuntimeEvent, type VmRuntimeOptions } from "./vm-runtime.ts";
