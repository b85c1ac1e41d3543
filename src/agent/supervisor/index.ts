// The node agent's side of the per-VM supervisor (supervisor/, docs/supervisor.md).
export { SupervisorLauncher, supervisionDir, vmMemoryLimitBytes, type SupervisorCgroupOptions, type SupervisorLauncherOptions } from "./launcher.ts";
export { SupervisedProcess, type SupervisedExit, type SupervisedProcessOptions } from "./supervised-process.ts";
export { adoptAllSupervised, adoptSupervised, type AdoptAllSupervisedResult, type AdoptSupervisedOptions } from "./adopt.ts";
export { decideSweep, listSupervised, sweepSupervised, type SupervisedEntry, type SupervisionInventory, type SweepCounts, type SweepOptions, type SweepPlan } from "./sweep.ts";
export { SUPERVISOR_FILES, type ExitRecord, type SupervisorIdentity } from "./records.ts";
export type { ProcessRef } from "./proc.ts";
export { MAX_LINE as SUPERVISOR_MAX_LINE, type SupervisorStatus } from "./protocol.ts";
export { memoryMount } from "./cgroups.ts";
