/**
 * The VM lifecycles, each one list of the steps in `boot-steps.ts` and `snapshot-steps.ts`:
 *
 *   boot      vm-dir → image → disks → network → vmm → guest → configure → setup → exec
 *   restore   vm-dir → image → snapshot → disks → network → vmm → guest → configure → setup → exec
 *   template  vm-dir → image → snapshot → disks → network → vmm → guest → warm-up → save
 *   adopt     adopt → guest → follow                       (an agent restarted; nothing is sent again)
 *
 * The node agent runs all four (a restore that fails before its setup is sent boots instead);
 * `imp run` runs the boot with its own ports (no network, no setup, direct children, streamed
 * output). After boot, restore or adopt, `followToEnd` waits for the workload's end.
 */
import type { SnapshotFiles } from "../snapshot/index.ts";
import type { VmmProcess } from "../vmm/index.ts";
import { adoptSteps, configureSteps, connectSteps, dirAndImageSteps, disksAndNetworkSteps, followSteps, launchSteps, prepareSteps, workloadSteps, type AdoptionFacts, type BootDeps } from "./boot-steps.ts";
import { restoreSnapshotSteps, saveSteps, templateSnapshotSteps, warmUpSteps, type RestoreEvents, type SnapshotDeps } from "./snapshot-steps.ts";

export function bootPipeline(deps: BootDeps) {
  return prepareSteps(deps)
    .then(launchSteps(deps))
    .then(connectSteps(deps, { timeoutMs: deps.timeouts.bootMs, faultPoint: true }))
    .then(configureSteps(deps))
    .then(workloadSteps(deps));
}

/** A job VM restored from its node's memory snapshot; `events` hear of the snapshot found, or of one there is not (yet). */
export function restorePipeline(deps: BootDeps, snapshots: SnapshotDeps, events: RestoreEvents) {
  return dirAndImageSteps(deps)
    .then(restoreSnapshotSteps(deps, snapshots, events))
    .then(disksAndNetworkSteps(deps))
    .then(launchSteps(deps))
    // A restored guest answers in a fraction of a second; one that does not within a request's
    // time is stuck, and the VM boots instead (its restore deadline bounds the rest).
    .then(connectSteps(deps, { timeoutMs: deps.timeouts.requestMs, faultPoint: true }))
    .then(configureSteps(deps))
    .then(workloadSteps(deps));
}

/** The template VM of a snapshot, saved into `files` once its guest agent answers. */
export function templatePipeline(deps: BootDeps, files: SnapshotFiles) {
  return dirAndImageSteps(deps)
    .then(templateSnapshotSteps(deps, files))
    .then(disksAndNetworkSteps(deps))
    .then(launchSteps(deps))
    .then(connectSteps(deps, { timeoutMs: deps.timeouts.bootMs, faultPoint: false }))
    .then(warmUpSteps(deps))
    .then(saveSteps(deps, files));
}

export function adoptPipeline(deps: BootDeps, facts: AdoptionFacts, processes: readonly VmmProcess[]) {
  return adoptSteps(deps, facts, processes)
    .then(connectSteps(deps, { timeoutMs: deps.timeouts.requestMs, faultPoint: false }))
    .then(followSteps(deps));
}
